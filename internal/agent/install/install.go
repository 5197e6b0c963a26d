// Package install puts the mesh-cni plugin on a node: it copies the binaries
// (the plugin and mesh-cni-podget, the helper it execs for its API lookup),
// chains the plugin into the primary CNI config the runtime uses, keeps it
// chained when the primary rewrites its file, and undoes all of it on
// uninstall, restoring the primary's config byte for byte.
package install

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

// seen is an installed file's stamp and its source's, as last copied.
type seen struct{ dst, src fileStamp }

// fileStamp identifies a file's version without reading it.
type fileStamp struct {
	ino, size int64
	mtime     time.Time
	mode      os.FileMode
}

func stampOf(path string) (fileStamp, bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, false
	}
	st := fileStamp{size: fi.Size(), mtime: fi.ModTime(), mode: fi.Mode()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = int64(sys.Ino)
	}
	return st, true
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

// InstallBinary copies the helper, then the plugin, into the bin dir. It
// must succeed before any config names the plugin: CRI-O skips a list
// whose plugins are missing. The helper goes first so a new plugin never
// runs without it.
func (in *Installer) InstallBinary() (bool, error) {
	if fi, err := os.Stat(in.cfg.BinDir); err != nil {
		return false, fmt.Errorf("CNI bin dir: %w", err)
	} else if !fi.IsDir() {
		return false, fmt.Errorf("CNI bin dir %s is not a directory", in.cfg.BinDir)
	}
	var helperChanged bool
	if in.cfg.HelperBinary != "" {
		var err error
		if helperChanged, err = installFile(in.cfg.HelperBinary, in.HelperPath(), &in.helper); err != nil {
			return false, fmt.Errorf("install %s: %w", node.HelperBinary, err)
		}
	}
	changed, err := installFile(in.cfg.PluginBinary, in.BinaryPath(), &in.plugin)
	if err != nil {
		return helperChanged, fmt.Errorf("install plugin binary: %w", err)
	}
	return changed || helperChanged, nil
}

// installFile copies src to dst unless neither changed since last time.
func installFile(src, dst string, last *seen) (bool, error) {
	srcSt, srcOK := stampOf(src)
	if dstSt, ok := stampOf(dst); ok && srcOK && dstSt == last.dst && srcSt == last.src {
		return false, nil
	}
	changed, err := CopyFileAtomic(src, dst, 0o755)
	if err != nil {
		*last = seen{}
		return false, err
	}
	last.dst, _ = stampOf(dst)
	last.src = srcSt
	return changed, nil
}

// BinaryInstalled reports whether the bin dir holds the plugin (and the
// helper) we ship.
func (in *Installer) BinaryInstalled() error {
	if err := sameFile(in.cfg.PluginBinary, in.BinaryPath(), "plugin binary"); err != nil {
		return err
	}
	if in.cfg.HelperBinary != "" {
		return sameFile(in.cfg.HelperBinary, in.HelperPath(), node.HelperBinary)
	}
	return nil
}

func sameFile(src, dst, what string) error {
	want, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("read %s: %w", src, err)
	}
	got, err := os.ReadFile(dst)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !bytes.Equal(want, got) {
		return fmt.Errorf("%s %s differs from the one shipped", what, dst)
	}
	return nil
}

// Reconcile makes the runtime's config name the plugin, changing nothing
// when it already does. It never touches a file other than the active
// primary config (or, in subdir mode, our own file next to it).
func (in *Installer) Reconcile() (Result, error) {
	if fi, err := os.Stat(in.cfg.ConfDir); err != nil {
		return Result{}, fmt.Errorf("CNI conf dir: %w", err)
	} else if !fi.IsDir() {
		return Result{}, fmt.Errorf("CNI conf dir %s is not a directory", in.cfg.ConfDir)
	}
	if !in.cfg.Chained {
		return in.reconcileStandalone()
	}
	found, cands, err := findPrimary(in.cfg.ConfDir, in.cfg.ConfFileName)
	primary, data := found.Path, found.data
	if settling(cands) {
		return Result{}, fmt.Errorf("%w: %s", ErrSettling, describeSkipped(cands))
	}
	if err != nil {
		if why := describeSkipped(cands); why != "" {
			return Result{}, fmt.Errorf("%w (skipped: %s)", err, why)
		}
		return Result{}, err
	}
	if primary, err = in.resolveLink(primary); err != nil {
		return Result{}, err
	}
	if p := in.cfg.Preflight; p != nil && p.PrimaryBinaries {
		if err := checkPrimaryBinaries(in.cfg.BinDir, primary, data); err != nil {
			return Result{Primary: primary}, err
		}
	}
	if !strings.HasSuffix(primary, ".conflist") {
		if in.cfg.Subdir {
			return Result{}, fmt.Errorf("subdir chaining needs a .conflist primary; %s is a single-plugin config (the runtime does not load subdir plugins for it)", filepath.Base(primary))
		}
		return in.convert(primary, data)
	}
	if err := checkHasPrimaryPlugin(data); err != nil {
		return Result{}, fmt.Errorf("primary config %s: %w; not chaining into it", filepath.Base(primary), err)
	}
	if in.cfg.Subdir {
		return in.reconcileSubdir(primary, data)
	}
	return in.appendTo(primary, data)
}

// resolveLink follows a symlinked primary to the file it names, so the
// edit goes there instead of replacing the link with a copy. A target
// outside the conf dir (an absolute host path that means something else in
// this container) is refused.
func (in *Installer) resolveLink(primary string) (string, error) {
	fi, err := os.Lstat(primary)
	if err != nil || fi.Mode()&os.ModeSymlink == 0 {
		return primary, nil //nolint:nilerr // not a link we can see: edit the path itself
	}
	target, err := filepath.EvalSymlinks(primary)
	if err != nil {
		return "", fmt.Errorf("primary config %s is a symlink that cannot be followed: %w", filepath.Base(primary), err)
	}
	dir, err := filepath.EvalSymlinks(in.cfg.ConfDir)
	if err != nil {
		return "", err
	}
	if filepath.Dir(target) != dir || filepath.Ext(target) != filepath.Ext(primary) {
		return "", fmt.Errorf("primary config %s is a symlink to %s; mesh-cni edits only files in the conf dir (set --conf-file-name to the file itself, or use --subdir-chaining)", filepath.Base(primary), target)
	}
	return filepath.Join(in.cfg.ConfDir, filepath.Base(target)), nil
}

// unchanged makes sure the primary still holds what we read, right before
// we replace it: a writer that rewrote it meanwhile must not lose its new
// content to our edit of the old one. The caller's next pass sees theirs.
func unchanged(path string, data []byte) error {
	cur, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrSettling, filepath.Base(path), err) //nolint:errorlint // the second error is context, not a cause to match
	}
	if !bytes.Equal(cur, data) {
		return fmt.Errorf("%w: %s changed while being chained", ErrSettling, filepath.Base(path))
	}
	return nil
}

// settling is true when an invalid file that would come before the
// primary was modified moments ago: likely a writer mid-way through a
// non-atomic write.
func settling(cands []Candidate) bool {
	for _, c := range cands {
		if c.Err == nil {
			return false
		}
		if fi, err := os.Stat(c.Path); err == nil && time.Since(fi.ModTime()) < settleTime {
			return true
		}
	}
	return false
}

// checkHasPrimaryPlugin refuses a list that has no interface plugin left
// (only chained plugins): chaining into it cannot give pods a network.
func checkHasPrimaryPlugin(data []byte) error {
	types, err := pluginTypes(data)
	if err != nil {
		return err
	}
	for _, t := range types {
		if !chainOnlyTypes[t] {
			return nil
		}
	}
	return fmt.Errorf("its plugin list %v has no primary (interface) plugin, only chained ones", types)
}

func (in *Installer) hasOurEntry(data []byte) (bool, error) {
	ours, err := pluginsOfType(data, node.PluginType)
	if err != nil {
		return false, err
	}
	return len(ours) == 1 && jsonEqual(ours[0], in.cfg.Entry), nil
}

func (in *Installer) appendTo(primary string, data []byte) (Result, error) {
	res := Result{Conf: primary, Primary: primary, Others: otherMeshes(data, in.cfg.MigrateFrom)}
	if done, err := in.handBack(primary, data, &res); done || err != nil {
		res.Others = otherMeshes(data, in.cfg.HandBackTo)
		return res, err
	}
	ok, err := in.hasOurEntry(data)
	if err != nil {
		return res, err
	}
	theirs := 0
	if in.cfg.MigrateFrom != "" {
		n, _ := pluginsOfType(data, in.cfg.MigrateFrom)
		theirs = len(n)
	}
	if ok && theirs == 0 {
		return res, nil
	}
	stripped, removed, err := removePlugins(data, node.PluginType)
	if err != nil {
		return res, err
	}
	if theirs > 0 {
		// Theirs out and ours in, in the one write below: no pod starts
		// with both plugins or with neither.
		if stripped, res.Replaced, err = removePlugins(stripped, in.cfg.MigrateFrom); err != nil {
			return res, err
		}
	}
	out, err := appendPlugin(stripped, in.cfg.Entry)
	if err != nil {
		return res, err
	}
	if _, err := parseConfig(primary, out); err != nil {
		return res, fmt.Errorf("chained config would not load (left %s alone): %w", filepath.Base(primary), err)
	}
	rec, err := in.loadRecord()
	if err != nil {
		return res, err
	}
	base := filepath.Base(primary)
	res.Rechained = removed == 0 && rec.hasChained(base)
	if err := in.saveBackup(base, stripped); err != nil {
		return res, err
	}
	if rec.addChained(base) {
		if err := in.saveRecord(rec); err != nil {
			return res, err
		}
	}
	if err := unchanged(primary, data); err != nil {
		return res, err
	}
	if err := WriteFileAtomic(primary, out, 0o644); err != nil {
		return res, fmt.Errorf("write chained config: %w", err)
	}
	res.Wrote = true
	return res, nil
}

// convert turns a single-plugin .conf (or .json) primary into a .conflist
// with our entry. The new file is durable before the old one goes, so a
// crash in between leaves a loadable config either way.
func (in *Installer) convert(primary string, data []byte) (Result, error) {
	target := strings.TrimSuffix(primary, filepath.Ext(primary)) + ".conflist"
	res := Result{Conf: target, Primary: primary, Converted: true}
	if existing, err := os.ReadFile(target); err == nil {
		if n, _ := pluginsOfType(existing, node.PluginType); len(n) == 0 {
			return res, fmt.Errorf("cannot convert %s: %s exists and was not written by mesh-cni", filepath.Base(primary), filepath.Base(target))
		}
	}
	list, err := convertConf(data)
	if err != nil {
		return res, fmt.Errorf("convert %s: %w", filepath.Base(primary), err)
	}
	if err := checkHasPrimaryPlugin(list); err != nil {
		return res, fmt.Errorf("primary config %s: %w; not chaining into it", filepath.Base(primary), err)
	}
	out, err := appendPlugin(list, in.cfg.Entry)
	if err != nil {
		return res, err
	}
	if _, err := parseConfig(target, out); err != nil {
		return res, fmt.Errorf("converted config would not load (left %s alone): %w", filepath.Base(primary), err)
	}
	rec, err := in.loadRecord()
	if err != nil {
		return res, err
	}
	if err := in.saveBackup(filepath.Base(primary), data); err != nil {
		return res, err
	}
	rec.Converted[filepath.Base(target)] = filepath.Base(primary)
	if err := in.saveRecord(rec); err != nil {
		return res, err
	}
	mode := os.FileMode(0o644)
	if fi, err := os.Stat(primary); err == nil {
		mode = fi.Mode().Perm()
	}
	if err := unchanged(primary, data); err != nil {
		return res, err
	}
	if err := WriteFileAtomic(target, out, mode); err != nil {
		return res, fmt.Errorf("write converted config: %w", err)
	}
	if err := RemoveFileDurable(primary); err != nil {
		return res, err
	}
	res.Wrote = true
	return res, nil
}

func (in *Installer) reconcileStandalone() (Result, error) {
	name := in.cfg.ConfFileName
	if name == "" {
		name = StandaloneName
	}
	path := filepath.Join(in.cfg.ConfDir, name)
	res := Result{Conf: path, Primary: path}
	out, err := standaloneList(in.cfg.Entry)
	if err != nil {
		return res, err
	}
	if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, out) {
		return res, nil
	}
	rec, err := in.loadRecord()
	if err != nil {
		return res, err
	}
	rec.Standalone = name
	if err := in.saveRecord(rec); err != nil {
		return res, err
	}
	if err := WriteFileAtomic(path, out, 0o644); err != nil {
		return res, err
	}
	res.Wrote = true
	return res, nil
}

func (in *Installer) reconcileSubdir(primary string, data []byte) (Result, error) {
	res := Result{Primary: primary}
	list, err := parseConfig(primary, data)
	if err != nil {
		return res, err
	}
	if list.LoadOnlyInlinedPlugins {
		return res, fmt.Errorf("primary config %s sets loadOnlyInlinedPlugins, so subdir chaining cannot work", filepath.Base(primary))
	}
	if list.Name == "" || strings.ContainsAny(list.Name, "/\\") || list.Name == "." || list.Name == ".." {
		return res, fmt.Errorf("primary network name %q cannot be a directory name", list.Name)
	}
	rec, err := in.loadRecord()
	if err != nil {
		return res, err
	}
	// An inline entry from an earlier chaining mode would run us twice.
	if n, _ := pluginsOfType(data, node.PluginType); len(n) > 0 {
		stripped, _, err := removePlugins(data, node.PluginType)
		if err != nil {
			return res, err
		}
		if err := WriteFileAtomic(primary, stripped, 0o644); err != nil {
			return res, err
		}
		res.Wrote = true
	}
	rel := filepath.Join(list.Name, node.PluginType+".conf")
	path := filepath.Join(in.cfg.ConfDir, rel)
	res.Conf = path
	var entry bytes.Buffer
	_ = json.Indent(&entry, in.cfg.Entry, "", "  ") // config.Load's JSON
	entry.WriteByte('\n')
	if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, entry.Bytes()) {
		return res, nil
	}
	if !contains(rec.Subdir, rel) {
		rec.Subdir = append(rec.Subdir, rel)
		if err := in.saveRecord(rec); err != nil {
			return res, err
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return res, fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	if err := WriteFileAtomic(path, entry.Bytes(), 0o644); err != nil {
		return res, err
	}
	res.Wrote = true
	return res, nil
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
