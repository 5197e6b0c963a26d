// Package install puts the mesh-cni plugin on a node: it copies the binaries
// (the plugin and mesh-cni-podget, the helper it execs for its API lookup),
// chains the plugin into the primary CNI config the runtime uses, keeps it
// chained when the primary rewrites its file, and undoes all of it on
// uninstall, restoring the primary's config byte for byte.
package install

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/mesh-cni/mesh-cni/internal/node"
)

// Config says where things are, as the agent's container sees them.
type Config struct {
	BinDir       string // host CNI bin dir (mounted)
	ConfDir      string // host CNI conf dir (mounted)
	ConfFileName string // "" = pick the primary as the runtime does
	Chained      bool   // false: write our own standalone conflist
	Subdir       bool   // drop <confdir>/<network>/mesh-cni.conf instead of editing the primary
	// MigrateFrom names another mesh CNI plugin (MigrateSources) whose
	// entry ours replaces in the same write; "" leaves other entries be.
	MigrateFrom string
	// HandBackTo names another mesh CNI plugin (MigrateSources) that
	// takes the node back: while the primary holds its entry, ours is
	// taken out (handback.go); while it holds none, ours is chained.
	HandBackTo   string
	StateDir     string // persistent: backups and the install record
	PluginBinary string // the plugin inside the image
	// HelperBinary is mesh-cni-podget inside the image, installed beside
	// the plugin (which runs it for its fallback pod GET); "" installs
	// the plugin alone.
	HelperBinary string
	Entry        []byte // the resolved chain entry (config.Load)
	// LoadEntry, when set, builds the entry afresh on every pass (the
	// chart's file may change); an error refuses the pass and leaves the
	// chain as it is. EntryDir is watched for that file's changes.
	LoadEntry func() ([]byte, error) `json:"-"`
	EntryDir  string
	Preflight *Preflight // nil: no node checks
	Log       *slog.Logger
}

// Result is what one Reconcile found and did.
type Result struct {
	Conf      string // the file that names the plugin now
	Primary   string // the primary config (differs from Conf in subdir mode)
	Wrote     bool   // we changed a file
	Rechained bool   // our entry had been removed by someone else and we put it back
	Converted bool   // a .conf became a .conflist
	// Replaced counts the entries of Config.MigrateFrom this pass took
	// out, in the write that put ours in.
	Replaced int
	// HandedBack names the Config.HandBackTo plugin when the primary holds
	// its entry and not ours (taken out by this pass or an earlier one).
	HandedBack string
	// Others lists other mesh CNI entries left in the primary (not
	// MigrateFrom): they run for the same pods as ours.
	Others []string
}

// StandaloneName is the default file name in non-chained mode.
const StandaloneName = "mesh-cni.conflist"

// ErrSettling means a config file changed a moment ago and is not valid
// yet; the caller retries shortly instead of acting on a half-written file.
var ErrSettling = errors.New("config dir is settling")

// settleTime is how long an invalid, just-modified file is given to become
// valid before we skip it the way the runtime would.
const settleTime = 2 * time.Second

// Installer does the work; it is not safe for concurrent use.
type Installer struct {
	cfg Config
	log *slog.Logger
	// What the installed binaries looked like after we last checked them,
	// so a pass does not re-read megabytes when nothing changed.
	plugin, helper seen
	shimSeen       seen // the taken-over plugin's name in the bin dir
}

// New checks cfg and returns an Installer.
func New(cfg Config) (*Installer, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if len(cfg.Entry) == 0 && cfg.LoadEntry == nil {
		return nil, fmt.Errorf("no chain entry")
	}
	if cfg.BinDir == "" || cfg.ConfDir == "" || cfg.StateDir == "" {
		return nil, fmt.Errorf("bin dir, conf dir and state dir must be set")
	}
	if err := checkHandBackTo(cfg); err != nil {
		return nil, err
	}
	if err := checkMigrateFrom(cfg); err != nil {
		return nil, err
	}
	return &Installer{cfg: cfg, log: cfg.Log}, nil
}

// BinaryPath is where the plugin binary goes.
func (in *Installer) BinaryPath() string { return filepath.Join(in.cfg.BinDir, node.PluginType) }

// HelperPath is where mesh-cni-podget goes: beside the plugin, where the
// plugin looks for it.
func (in *Installer) HelperPath() string { return filepath.Join(in.cfg.BinDir, node.HelperBinary) }
