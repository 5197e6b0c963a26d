package install

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"

	"github.com/fsnotify/fsnotify"
)

// runWatch starts the watch loop and returns a channel of its reports.
func runWatch(t *testing.T, e *env) (<-chan State, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan State, 4096)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := e.in.Run(ctx, WatchOptions{RetryDelay: 50 * time.Millisecond}, func(s State) {
			select {
			case ch <- s:
			default:
			}
		}); err != nil {
			t.Error(err)
		}
	}()
	return ch, func() { cancel(); <-done }
}

func waitState(t *testing.T, ch <-chan State, ok func(State) bool) State {
	t.Helper()
	timeout := time.After(testenv.Timeout())
	for {
		select {
		case s := <-ch:
			if ok(s) {
				return s
			}
		case <-timeout:
			t.Fatalf("no matching report from the watch loop within %v", testenv.Timeout())
		}
	}
}

// writeLikePrimary rewrites the file the way CNI daemons do: atomically
// (kindnet, Cilium) or by truncating in place (Calico's os.WriteFile).
func writeLikePrimary(t testing.TB, path string, data []byte, inPlace bool) {
	t.Helper()
	if inPlace {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	tmp := filepath.Join(filepath.Dir(path), ".primary-tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestWatchWaitsForPrimaryThenChains(t *testing.T) {
	e := newEnv(t, nil)
	ch, stop := runWatch(t, e)
	defer stop()
	s := waitState(t, ch, func(s State) bool { return s.Err != nil })
	if s.Stage != "config" {
		t.Fatalf("stage %q: %v", s.Stage, s.Err)
	}
	writeLikePrimary(t, filepath.Join(e.conf, "10-kindnet.conflist"), fixture(t, "kindnet-ipv4.conflist"), false)
	s = waitState(t, ch, func(s State) bool { return s.Err == nil })
	loadChained(t, s.Conf)
	if err := e.in.BinaryInstalled(); err != nil {
		t.Fatal(err)
	}
	// The binary is removed by someone: it comes back. So does the helper.
	for _, p := range []string{e.in.BinaryPath(), e.in.HelperPath()} {
		os.Remove(p)
		waitState(t, ch, func(s State) bool { return s.BinaryChanged })
		if err := e.in.BinaryInstalled(); err != nil {
			t.Fatal(err)
		}
	}
}

// 1000 rewrites by a primary: chained again after each, and each rewrite
// costs exactly one write of ours (no fight loop with ourselves).
func TestWatch1000Rewrites(t *testing.T) {
	var logs testenv.Buffer
	e := newEnv(t, func(c *Config) { c.Log = slog.New(slog.NewTextHandler(&logs, nil)) })
	path := filepath.Join(e.conf, "10-calico.conflist")
	orig := fixture(t, "calico-manifest-portmap-bandwidth.conflist")
	writeLikePrimary(t, path, orig, false)
	ch, stop := runWatch(t, e)
	defer stop()
	waitState(t, ch, func(s State) bool { return s.Err == nil && s.Conf == path })

	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Add(e.conf); err != nil {
		t.Fatal(err)
	}
	var writes, rechains, passes atomic.Int64
	var mu sync.Mutex
	go func() {
		for s := range ch {
			mu.Lock()
			if s.Wrote {
				writes.Add(1)
			}
			if s.Rechained {
				rechains.Add(1)
			}
			mu.Unlock()
			passes.Add(1) // last: a counted pass has its write counted
		}
	}()
	const n = 1000
	for i := 0; i < n; i++ {
		writeLikePrimary(t, path, orig, i%2 == 1)
		deadline := time.Now().Add(testenv.Timeout())
		for {
			cur, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(cur, orig) && len(cur) > len(orig) {
				if _, err := parseConfig(path, cur); err != nil {
					t.Fatalf("rewrite %d: invalid config: %v", i, err)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("rewrite %d: not chained again within %v", i, testenv.Timeout())
			}
			select {
			case <-w.Events:
			case <-time.After(20 * time.Millisecond):
			}
		}
		loadChained(t, path)
	}
	// Quiet: nothing more is written once the primary stops. A rewrite of
	// the chained file with its own bytes forces a pass; the first one also
	// flushes the report of the last re-chain, and the next two (the
	// rewrite's event, then the one our own write would cause) may not write.
	forcePass := func() {
		p0 := passes.Load()
		cur, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		writeLikePrimary(t, path, cur, false)
		if err := testenv.WaitFor(testenv.Timeout(), func() error {
			if passes.Load() == p0 {
				return errors.New("no pass yet")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	forcePass()
	before := writes.Load()
	forcePass()
	forcePass()
	if after := writes.Load(); after != before {
		t.Fatalf("agent kept writing after the primary stopped: %d → %d", before, after)
	}
	if got := writes.Load(); got < n || got > n+n/10 {
		t.Errorf("%d writes for %d rewrites", got, n)
	}
	if rechains.Load() < n*9/10 {
		t.Errorf("only %d rewrites counted as re-chains", rechains.Load())
	}
	// Someone removing us 1000 times in seconds is worth one warning a
	// minute, with a reason, not a thousand.
	if got := strings.Count(logs.String(), "keeps removing mesh-cni"); got != 1 {
		t.Errorf("%d fight warnings, want 1", got)
	}
	t.Logf("%d rewrites, %d writes, %d re-chains", n, writes.Load(), rechains.Load())
}

func TestFightDetector(t *testing.T) {
	f := newFightDetector(time.Minute, 5)
	now := time.Now()
	warned := 0
	for i := 0; i < 100; i++ {
		if f.add(now.Add(time.Duration(i) * time.Second)) {
			warned++
		}
	}
	// 100 s of re-chains every second: warn at the 5th, then at most once a minute.
	if warned != 2 {
		t.Fatalf("warned %d times", warned)
	}
	g := newFightDetector(time.Minute, 5)
	for i := 0; i < 10; i++ {
		if g.add(now.Add(time.Duration(i) * 20 * time.Second)) {
			t.Fatal("warned for rare re-chains")
		}
	}
}
