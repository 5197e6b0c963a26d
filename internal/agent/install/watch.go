package install

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/mesh-cni/mesh-cni/internal/node"
)

// State is reported after every pass of the watch loop.
type State struct {
	Result
	BinaryChanged bool
	Stage         string // where Err came from: "binary" or "config"
	Err           error  // nil: binary and config are in place
	// Kept is, after a refused pass (ErrRefused), the file that still
	// holds an entry of ours from an earlier pass ("" if none): the
	// runtime keeps running it, so ADD keeps working.
	Kept     string
	Watching bool
	// Fight is set, at most once a FightWindow, when re-chains come so
	// often that another component keeps removing our entry: what the
	// operator should look at.
	Fight string
	// Entry is the chain entry this pass put in force (nil when Err is
	// set): what the runtime hands the plugin, published on the Node so
	// the CLI can show what ADD does there.
	Entry []byte
	// Takeover is the progress of Config.MigrateFrom (From "" when off).
	Takeover Takeover
}

// WatchOptions tune the loop; zero values take the defaults.
type WatchOptions struct {
	Resync      time.Duration // full re-check without events (default 1m)
	RetryDelay  time.Duration // after an error (default 2s)
	SettleDelay time.Duration // while a file is mid-write (default 100ms)
	// FightWindow and FightCount: that many re-chains within the window
	// means something keeps removing us (default 5 in 1m).
	FightWindow time.Duration
	FightCount  int
	// TakeoverQuiet: no re-insert of the MigrateFrom entry for this long
	// means its installer is gone (default 5m: several of Istio's and
	// Linkerd's restart backoffs). TakeoverBurst takeover writes within
	// TakeoverWindow hold off further passes until the window frees, so
	// an installer that answers every write of ours cannot spin us
	// (default 20 in 10s; Istio's install-cni throttles itself to about
	// one a second, cni/pkg/install/install.go installationThrottle).
	TakeoverQuiet  time.Duration
	TakeoverBurst  int
	TakeoverWindow time.Duration
}

func (o *WatchOptions) defaults() {
	if o.Resync == 0 {
		o.Resync = time.Minute
	}
	if o.RetryDelay == 0 {
		o.RetryDelay = 2 * time.Second
	}
	if o.SettleDelay == 0 {
		o.SettleDelay = 100 * time.Millisecond
	}
	if o.FightWindow == 0 {
		o.FightWindow = time.Minute
	}
	if o.FightCount == 0 {
		o.FightCount = 5
	}
	if o.TakeoverQuiet == 0 {
		o.TakeoverQuiet = 5 * time.Minute
	}
	if o.TakeoverBurst == 0 {
		o.TakeoverBurst = 20
	}
	if o.TakeoverWindow == 0 {
		o.TakeoverWindow = 10 * time.Second
	}
}

// Run installs the binary, chains the plugin and keeps both in place until
// ctx ends, calling report after every pass. It returns only when ctx is
// done or the file watch cannot be kept (the caller restarts it).
func (in *Installer) Run(ctx context.Context, opts WatchOptions, report func(State)) error {
	opts.defaults()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("file watch: %w", err)
	}
	defer w.Close()
	watched := map[string]bool{}
	watch := func(dir string) {
		if dir == "" || watched[dir] {
			return
		}
		if err := w.Add(dir); err == nil {
			watched[dir] = true
		}
	}
	// Temp files a killed agent left behind.
	removeStaleTemps(in.cfg.ConfDir)
	removeStaleTemps(in.cfg.StateDir)
	fight := newFightDetector(opts.FightWindow, opts.FightCount)
	var take *takeoverTracker
	if in.cfg.MigrateFrom != "" {
		take = newTakeoverTracker(in.cfg.MigrateFrom, opts.TakeoverQuiet, opts.TakeoverBurst, opts.TakeoverWindow, time.Now())
	}
	var holdUntil time.Time
	lastErr, lastOthers := "", ""
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("file watch closed")
			}
			if !in.relevant(ev) {
				continue
			}
			drain(w.Events)
			if time.Now().Before(holdUntil) {
				continue // the timer runs the pass when the hold ends
			}
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("file watch closed")
			}
			// Overflow and the like: a full re-check covers lost events.
			in.log.Warn("file watch error, re-checking everything", "err", err)
		case <-timer.C:
		}
		watch(in.cfg.ConfDir)
		watch(in.cfg.BinDir)
		watch(in.cfg.EntryDir)
		st := in.pass()
		if st.Conf != "" && in.cfg.Subdir {
			watch(filepath.Dir(st.Conf))
		}
		st.Watching = watched[in.cfg.ConfDir] && watched[in.cfg.BinDir]
		if st.Err == nil && !st.Watching {
			st.Err = fmt.Errorf("cannot watch %s and %s", in.cfg.ConfDir, in.cfg.BinDir)
		}
		next := opts.Resync
		switch {
		case errors.Is(st.Err, ErrSettling):
			next = opts.SettleDelay
		case st.Err != nil:
			next = opts.RetryDelay
			// Log each distinct reason once, not every retry.
			if msg := st.Err.Error(); msg != lastErr {
				in.log.Warn("mesh-cni not installed", "err", st.Err)
				lastErr = msg
			}
		default:
			if lastErr != "" {
				in.log.Info("mesh-cni installed", "conf", st.Conf)
				lastErr = ""
			}
		}
		if take != nil {
			wasDone := take.t.Done
			if hold := take.pass(st.Replaced, time.Now()); hold > 0 {
				holdUntil = time.Now().Add(hold)
				next = min(next, hold)
				in.log.Warn("the replaced entry comes back after every write; holding off", "from", in.cfg.MigrateFrom,
					"writes", opts.TakeoverBurst, "window", opts.TakeoverWindow.String(), "hold", hold.String())
			}
			if st.Replaced > 0 {
				in.log.Info("replaced another mesh CNI's entry with mesh-cni's in one write", "from", in.cfg.MigrateFrom, "conf", st.Conf, "total", take.t.Replaced)
			}
			if take.t.Done && !wasDone {
				in.log.Info("takeover done: the replaced plugin's installer has not re-inserted its entry for the quiet period",
					"from", in.cfg.MigrateFrom, "quiet", opts.TakeoverQuiet.String(), "replaced", take.t.Replaced)
			}
			if !take.t.Done && st.Err == nil {
				next = min(next, take.untilDone(time.Now()))
			}
			st.Takeover = take.t
		}
		if o := strings.Join(st.Others, ","); o != lastOthers {
			if o != "" {
				in.log.Warn("another mesh CNI plugin is chained in the same config: its pods get both plugins' redirection; to switch to mesh-cni set migrateFrom",
					"conf", st.Conf, "plugins", o)
			}
			lastOthers = o
		}
		// A takeover write removed theirs, not ours: no fight.
		if st.Rechained && st.Replaced == 0 {
			in.log.Info("re-chained after the primary rewrote its config", "conf", st.Conf)
			if warn := fight.add(time.Now()); warn {
				in.log.Warn("another component keeps removing mesh-cni from the CNI config; it is put back each time, but pods may start unmeshed in between",
					"conf", st.Conf, "rechains", opts.FightCount, "window", opts.FightWindow.String(), "hint", fightHint(st.Conf))
				st.Fight = fmt.Sprintf("another component removed mesh-cni from %s %d times within %s; it is put back each time, but pods may start unmeshed in between. Look for %s",
					st.Conf, opts.FightCount, opts.FightWindow, fightHint(st.Conf))
			}
		}
		if report != nil {
			report(st)
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(next)
	}
}

// pass installs the binary, then the config, in that order.
func (in *Installer) pass() State {
	st := in.install()
	if errors.Is(st.Err, ErrRefused) {
		st.Kept = in.keptEntry()
	}
	return st
}

func (in *Installer) install() State {
	var st State
	if err := in.loadEntry(); err != nil {
		st.Err, st.Stage = err, "entry"
		return st
	}
	changed, err := in.InstallBinary()
	st.BinaryChanged = changed
	if err != nil {
		st.Err, st.Stage = err, "binary"
		return st
	}
	st.Result, st.Err = in.Reconcile()
	st.Stage = "config"
	if st.Err == nil {
		st.Entry = in.cfg.Entry
		if err := in.ensureShim(); err != nil {
			in.log.Warn("cannot place the DEL-only binary for the taken-over plugin", "from", in.cfg.MigrateFrom, "err", err)
		}
	}
	return st
}

// keptEntry names the file whose entry of ours the runtime still runs:
// the primary list holding exactly one mesh-cni plugin, or our own list in
// standalone mode. Subdir mode is not looked into ("").
func (in *Installer) keptEntry() string {
	if in.cfg.Subdir {
		return ""
	}
	if !in.cfg.Chained {
		name := in.cfg.ConfFileName
		if name == "" {
			name = StandaloneName
		}
		path := filepath.Join(in.cfg.ConfDir, name)
		if data, err := os.ReadFile(path); err == nil {
			if ours, err := pluginsOfType(data, node.PluginType); err == nil && len(ours) == 1 {
				return path
			}
		}
		return ""
	}
	found, _, err := findPrimary(in.cfg.ConfDir, in.cfg.ConfFileName)
	if err != nil {
		return ""
	}
	if ours, err := pluginsOfType(found.data, node.PluginType); err == nil && len(ours) == 1 {
		return found.Path
	}
	return ""
}

// loadEntry refreshes the entry and checks the backend's tools; on error
// nothing is touched, so the entry chained last stays in place.
func (in *Installer) loadEntry() error {
	if in.cfg.LoadEntry != nil {
		e, err := in.cfg.LoadEntry()
		if err != nil {
			return fmt.Errorf("%w: %w (fix the plugin settings; the chain keeps its previous entry)", ErrRefused, err)
		}
		in.cfg.Entry = e
	}
	if p := in.cfg.Preflight; p != nil {
		name := EntryBackend(in.cfg.Entry)
		if err := p.checkTools(name, BackendTools(name)); err != nil {
			return err
		}
	}
	return nil
}

// relevant drops events for our temp files and non-config files.
func (in *Installer) relevant(ev fsnotify.Event) bool {
	base := filepath.Base(ev.Name)
	if strings.HasPrefix(base, tmpPrefix) {
		return false
	}
	dir := filepath.Dir(ev.Name)
	if in.cfg.EntryDir != "" && dir == filepath.Clean(in.cfg.EntryDir) {
		return true
	}
	if dir == filepath.Clean(in.cfg.BinDir) {
		return base == filepath.Base(in.BinaryPath()) || base == filepath.Base(in.HelperPath())
	}
	if ev.Has(fsnotify.Chmod) && !ev.Has(fsnotify.Write) {
		return false
	}
	if fi, err := os.Stat(ev.Name); err == nil && fi.IsDir() {
		return true // a network subdir appeared
	}
	for _, ext := range ConfExtensions {
		if filepath.Ext(base) == ext {
			return true
		}
	}
	return dir != filepath.Clean(in.cfg.ConfDir) // our subdir file
}

func drain(ch <-chan fsnotify.Event) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// fightDetector says when re-chains come too often, at most once a window.
type fightDetector struct {
	window   time.Duration
	count    int
	times    []time.Time
	lastWarn time.Time
}

func newFightDetector(window time.Duration, count int) *fightDetector {
	return &fightDetector{window: window, count: count}
}

func (f *fightDetector) add(now time.Time) bool {
	f.times = append(f.times, now)
	for len(f.times) > 0 && now.Sub(f.times[0]) > f.window {
		f.times = f.times[1:]
	}
	if len(f.times) >= f.count && now.Sub(f.lastWarn) > f.window {
		f.lastWarn = now
		return true
	}
	return false
}

func fightHint(conf string) string {
	if strings.Contains(filepath.Base(conf), "cilium") {
		return "Cilium with cni.exclusive=true rewrites or deletes other CNI configs; set cni.exclusive=false (Helm: --set cni.exclusive=false)"
	}
	return "a CNI daemon that rewrites its config on a timer or on every restart (e.g. Cilium's cni.exclusive, Calico's install-cni) or a config-management tool owning /etc/cni/net.d"
}
