package install

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// MigrateSources are the mesh CNI plugins whose entry the agent can take
// over (Config.MigrateFrom): each is the plugin type its installer writes
// into the primary's conflist, appended last (Istio: cni/pkg/install/
// cniconfig.go insertCNIConfig; Linkerd: linkerd2-proxy-init's installer).
var MigrateSources = []string{"istio-cni", "linkerd-cni"}

// otherMeshTypes are the entries that redirect a mesh's pods like ours.
var otherMeshTypes = MigrateSources

// checkMigrateFrom accepts "" or one of MigrateSources, in inline chaining
// only: the entry that removes theirs must be the one that adds ours, in
// one write of one file.
func checkMigrateFrom(cfg Config) error {
	if cfg.MigrateFrom == "" {
		return nil
	}
	if !slices.Contains(MigrateSources, cfg.MigrateFrom) {
		return fmt.Errorf("migrate from %q: must be one of %v", cfg.MigrateFrom, MigrateSources)
	}
	if !cfg.Chained || cfg.Subdir {
		return fmt.Errorf("migrate from %s needs inline chaining (chained, not subdir): the write that removes its entry must add ours", cfg.MigrateFrom)
	}
	return nil
}

// otherMeshes lists the mesh CNI entries in a conflist other than skip.
func otherMeshes(data []byte, skip string) []string {
	types, err := pluginTypes(data)
	if err != nil {
		return nil
	}
	var out []string
	for _, t := range types {
		if t != skip && slices.Contains(otherMeshTypes, t) && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// Takeover is the progress of replacing another mesh CNI's entry. While
// that mesh's installer still runs it puts its entry back (Istio's
// install-cni on every change of the conf dir that leaves it out:
// cni/pkg/install/install.go checkValidCNIConfig, sleepWatchInstall); each
// time the next pass replaces it again. Done says no re-insert came for
// the quiet period: its installer is gone from this node.
type Takeover struct {
	From     string    // "" when not migrating
	Replaced int       // entries of From replaced by ours since start
	Last     time.Time // last replacement (zero: none yet)
	Since    time.Time // takeover watch started
	Done     bool
}

// String is the status line: "taking over from istio-cni (...)" or
// "took over from istio-cni (...)".
func (t Takeover) String() string {
	if t.From == "" {
		return ""
	}
	if t.Done {
		return fmt.Sprintf("took over from %s (%d entries replaced; no re-insert since)", t.From, t.Replaced)
	}
	return fmt.Sprintf("taking over from %s (%d entries replaced; its installer may still re-insert)", t.From, t.Replaced)
}

// takeoverTracker keeps Takeover up to date and bounds the writes spent
// on it: an installer that re-inserts on every change, including ours,
// would otherwise ping-pong with us as fast as the disk allows.
type takeoverTracker struct {
	t      Takeover
	quiet  time.Duration
	burst  int
	window time.Duration
	writes []time.Time
}

func newTakeoverTracker(from string, quiet time.Duration, burst int, window time.Duration, now time.Time) *takeoverTracker {
	return &takeoverTracker{t: Takeover{From: from, Since: now}, quiet: quiet, burst: burst, window: window}
}

// pass records one pass; it returns how long to hold off the next pass
// (0: none) because the takeover writes reached the burst in the window.
func (k *takeoverTracker) pass(replaced int, now time.Time) time.Duration {
	if replaced > 0 {
		k.t.Replaced += replaced
		k.t.Last = now
		k.t.Done = false
		k.writes = append(k.writes, now)
	}
	for len(k.writes) > 0 && now.Sub(k.writes[0]) >= k.window {
		k.writes = k.writes[1:]
	}
	last := k.t.Last
	if last.IsZero() {
		last = k.t.Since
	}
	if !k.t.Done && now.Sub(last) >= k.quiet {
		k.t.Done = true
	}
	if replaced > 0 && len(k.writes) >= k.burst {
		return k.writes[0].Add(k.window).Sub(now)
	}
	return 0
}

// untilDone is how long until Done turns true without a replacement.
func (k *takeoverTracker) untilDone(now time.Time) time.Duration {
	if k.t.Done {
		return 0
	}
	last := k.t.Last
	if last.IsZero() {
		last = k.t.Since
	}
	return max(last.Add(k.quiet).Sub(now), time.Millisecond)
}

// shim records the binary placed as the taken-over plugin.
type shim struct {
	Name   string `json:"name"`
	SHA256 string `json:"sha256"`
}

func fileSHA(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ensureShim keeps a DEL-only stand-in for the taken-over plugin in the
// bin dir once its own binary is gone (its installer deletes it on exit:
// Istio's Cleanup, cni/pkg/install/install.go:186-194; Linkerd's Remove,
// internal/cni/remove.go). Pods it set up keep their cached config, which
// CRI-O replays on DEL; the plugin binary run under that name answers it
// (plugin/retired.go). A file there that is not ours (their binary, back
// with their DaemonSet) is left alone.
func (in *Installer) ensureShim() error {
	from := in.cfg.MigrateFrom
	if from == "" {
		return nil
	}
	dst := filepath.Join(in.cfg.BinDir, from)
	srcSt, _ := stampOf(in.cfg.PluginBinary)
	dstSt, exists := stampOf(dst)
	if exists && dstSt == in.shimSeen.dst && srcSt == in.shimSeen.src {
		return nil
	}
	rec, err := in.loadRecord()
	if err != nil {
		return err
	}
	want, err := fileSHA(in.cfg.PluginBinary)
	if err != nil {
		return err
	}
	if exists {
		have, err := fileSHA(dst)
		if err != nil {
			return err
		}
		ours := rec.Shim != nil && rec.Shim.Name == from && rec.Shim.SHA256 == have
		if !ours || have == want {
			if !ours && rec.Shim != nil {
				rec.Shim = nil // theirs again: nothing of ours to remove
				if err := in.saveRecord(rec); err != nil {
					return err
				}
			}
			in.shimSeen = seen{dst: dstSt, src: srcSt}
			return nil
		}
	}
	// Recorded first: uninstall removes what the record names.
	rec.Shim = &shim{Name: from, SHA256: want}
	if err := in.saveRecord(rec); err != nil {
		return err
	}
	if _, err := CopyFileAtomic(in.cfg.PluginBinary, dst, 0o755); err != nil {
		return fmt.Errorf("place %s: %w", dst, err)
	}
	st, _ := stampOf(dst)
	in.shimSeen = seen{dst: st, src: srcSt}
	in.log.Info("placed a DEL-only stand-in for the taken-over plugin, for pods it set up", "path", dst)
	return nil
}

// removeShim deletes the stand-in if it is still the one we placed.
func (in *Installer) removeShim(rec *record) error {
	if rec.Shim == nil {
		return nil
	}
	dst := filepath.Join(in.cfg.BinDir, rec.Shim.Name)
	have, err := fileSHA(dst)
	if errors.Is(err, os.ErrNotExist) || (err == nil && have != rec.Shim.SHA256) {
		return nil
	}
	if err != nil {
		return err
	}
	return RemoveFileDurable(dst)
}
