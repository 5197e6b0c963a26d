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
	// Temp files a killed agent left behind.
	removeStaleTemps(in.cfg.ConfDir)
	removeStaleTemps(in.cfg.StateDir)
	l := newWatchLoop(in, opts, w)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		if stop, err := l.wait(ctx, timer.C); stop {
			return err
		}
		st, next := l.pass()
		if report != nil {
			report(st)
		}
		resetTimer(timer, next)
	}
}

// watchLoop is what Run keeps from one pass to the next.
type watchLoop struct {
	in      *Installer
	opts    WatchOptions
	w       *fsnotify.Watcher
	watched map[string]bool
	fight   *fightDetector
	take    *takeoverTracker // nil without MigrateFrom
	// holdUntil: events before it wait for the timer, so an installer
	// that answers every takeover write cannot spin us.
	holdUntil time.Time
	// The last reason logged and the last other plugins warned about:
	// each distinct one is logged once, not on every pass.
	lastErr, lastOthers string
}

func newWatchLoop(in *Installer, opts WatchOptions, w *fsnotify.Watcher) *watchLoop {
	l := &watchLoop{in: in, opts: opts, w: w, watched: map[string]bool{},
		fight: newFightDetector(opts.FightWindow, opts.FightCount)}
	if in.cfg.MigrateFrom != "" {
		l.take = newTakeoverTracker(in.cfg.MigrateFrom, opts.TakeoverQuiet, opts.TakeoverBurst, opts.TakeoverWindow, time.Now())
	}
	return l
}

// wait blocks until a pass is due: the timer fired, a relevant change came
// in outside a takeover hold, or the watch reported an error. stop is true
// when ctx ended (err nil) or the watch was closed.
func (l *watchLoop) wait(ctx context.Context, timer <-chan time.Time) (stop bool, err error) {
	for {
		select {
		case <-ctx.Done():
			return true, nil
		case ev, ok := <-l.w.Events:
			if !ok {
				return true, errors.New("file watch closed")
			}
			if !l.in.relevant(ev) {
				continue
			}
			drain(l.w.Events)
			if time.Now().Before(l.holdUntil) {
				continue // the timer runs the pass when the hold ends
			}
			return false, nil
		case err, ok := <-l.w.Errors:
			if !ok {
				return true, errors.New("file watch closed")
			}
			// Overflow and the like: a full re-check covers lost events.
			l.in.log.Warn("file watch error, re-checking everything", "err", err)
			return false, nil
		case <-timer:
			return false, nil
		}
	}
}

// watch adds dir to the file watch once; a dir that cannot be watched yet
// is tried again on the next pass.
func (l *watchLoop) watch(dir string) {
	if dir == "" || l.watched[dir] {
		return
	}
	if err := l.w.Add(dir); err == nil {
		l.watched[dir] = true
	}
}

// pass runs one install pass and returns its state and when the next
// pass is due without an event.
func (l *watchLoop) pass() (State, time.Duration) {
	cfg := l.in.cfg
	l.watch(cfg.ConfDir)
	l.watch(cfg.BinDir)
	l.watch(cfg.EntryDir)
	st := l.in.pass()
	if st.Conf != "" && cfg.Subdir {
		l.watch(filepath.Dir(st.Conf))
	}
	st.Watching = l.watched[cfg.ConfDir] && l.watched[cfg.BinDir]
	if st.Err == nil && !st.Watching {
		st.Err = fmt.Errorf("cannot watch %s and %s", cfg.ConfDir, cfg.BinDir)
	}
	next := l.noteResult(st)
	if l.take != nil {
		next = l.noteTakeover(&st, next)
	}
	l.noteOthers(st)
	l.noteRechain(&st)
	return st, next
}

// noteResult logs a change between installed and not, and picks the delay
// that suits the result: soon for a file mid-write, a retry after an
// error, else the resync.
func (l *watchLoop) noteResult(st State) time.Duration {
	switch {
	case errors.Is(st.Err, ErrSettling):
		return l.opts.SettleDelay
	case st.Err != nil:
		// Log each distinct reason once, not every retry.
		if msg := st.Err.Error(); msg != l.lastErr {
			l.in.log.Warn("mesh-cni not installed", "err", st.Err)
			l.lastErr = msg
		}
		return l.opts.RetryDelay
	default:
		if l.lastErr != "" {
			l.in.log.Info("mesh-cni installed", "conf", st.Conf)
			l.lastErr = ""
		}
		return l.opts.Resync
	}
}

// noteTakeover feeds the pass to the takeover tracker, logs its steps and
// shortens next to the end of a hold or of the quiet period.
func (l *watchLoop) noteTakeover(st *State, next time.Duration) time.Duration {
	take, from := l.take, l.in.cfg.MigrateFrom
	wasDone := take.t.Done
	if hold := take.pass(st.Replaced, time.Now()); hold > 0 {
		l.holdUntil = time.Now().Add(hold)
		next = min(next, hold)
		l.in.log.Warn("the replaced entry comes back after every write; holding off", "from", from,
			"writes", l.opts.TakeoverBurst, "window", l.opts.TakeoverWindow.String(), "hold", hold.String())
	}
	if st.Replaced > 0 {
		l.in.log.Info("replaced another mesh CNI's entry with mesh-cni's in one write", "from", from, "conf", st.Conf, "total", take.t.Replaced)
	}
	if take.t.Done && !wasDone {
		l.in.log.Info("takeover done: the replaced plugin's installer has not re-inserted its entry for the quiet period",
			"from", from, "quiet", l.opts.TakeoverQuiet.String(), "replaced", take.t.Replaced)
	}
	if !take.t.Done && st.Err == nil {
		next = min(next, take.untilDone(time.Now()))
	}
	st.Takeover = take.t
	return next
}

// noteOthers warns, once per change, about other mesh CNI plugins chained
// beside ours.
func (l *watchLoop) noteOthers(st State) {
	o := strings.Join(st.Others, ",")
	if o == l.lastOthers {
		return
	}
	if o != "" {
		l.in.log.Warn("another mesh CNI plugin is chained in the same config: "+node.OtherMeshEffect,
			"conf", st.Conf, "plugins", o, "fix", node.OtherMeshFix(st.Others[0]))
	}
	l.lastOthers = o
}

// noteRechain counts re-chains and sets st.Fight when they come so often
// that another component keeps removing our entry.
func (l *watchLoop) noteRechain(st *State) {
	// A takeover write removed theirs, not ours: no fight.
	if !st.Rechained || st.Replaced != 0 {
		return
	}
	l.in.log.Info("re-chained after the primary rewrote its config", "conf", st.Conf)
	if !l.fight.add(time.Now()) {
		return
	}
	l.in.log.Warn("another component keeps removing mesh-cni from the CNI config; it is put back each time, but pods may start unmeshed in between",
		"conf", st.Conf, "rechains", l.opts.FightCount, "window", l.opts.FightWindow.String(), "hint", fightHint(st.Conf))
	st.Fight = fmt.Sprintf("another component removed mesh-cni from %s %d times within %s; it is put back each time, but pods may start unmeshed in between. Look for %s",
		st.Conf, l.opts.FightCount, l.opts.FightWindow, fightHint(st.Conf))
}

// resetTimer makes timer fire after d, dropping a tick not yet read.
func resetTimer(timer *time.Timer, d time.Duration) {
	if !timer.Stop() {
		select {
		case <-timer.C:
		default:
		}
	}
	timer.Reset(d)
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
