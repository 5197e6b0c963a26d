// Package retrytest checks the waits a retry loop took against its
// backoff: each wait between the schedule's step and that step plus its
// jitter, never past the cap plus jitter, and not all exactly on the
// schedule (so the jitter is there).
package retrytest

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Log is a slog handler that keeps the "retry_in" durations of the
// records logged through it, in order.
type Log struct {
	mu     sync.Mutex
	delays []time.Duration
	msgs   []string
}

// Logger returns a logger (all levels) that records into l.
func (l *Log) Logger() *slog.Logger { return slog.New(l) }

func (l *Log) Enabled(context.Context, slog.Level) bool { return true }
func (l *Log) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *Log) WithGroup(string) slog.Handler            { return l }

func (l *Log) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "retry_in" {
			l.delays = append(l.delays, a.Value.Duration())
		}
		return true
	})
	return nil
}

// Delays is what was logged as retry_in so far.
func (l *Log) Delays() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Duration(nil), l.delays...)
}

// Messages is every message logged so far.
func (l *Log) Messages() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.msgs...)
}

// Check fails t unless delays, the waits after consecutive failures, follow
// b: the i-th within [step, step·(1+Jitter)] where step is b.Duration
// times b.Factor^i up to b.Cap, and at least one strictly above its step.
// It wants at least 3 delays, so the jitter cannot be missed by chance.
func Check(t testing.TB, b wait.Backoff, delays []time.Duration) {
	t.Helper()
	if len(delays) < 3 {
		t.Fatalf("want at least 3 waits to check, got %v", delays)
	}
	step := b.Duration
	jittered := false
	for i, d := range delays {
		hi := step + time.Duration(b.Jitter*float64(step))
		if d < step || d > hi {
			t.Errorf("wait %d is %v, want within [%v, %v] (waits %v)", i, d, step, hi, delays)
		}
		if d != step {
			jittered = true
		}
		if step = time.Duration(float64(step) * b.Factor); b.Cap > 0 && step > b.Cap {
			step = b.Cap
		}
	}
	if !jittered {
		t.Errorf("waits %v are exactly the schedule: no jitter", delays)
	}
}

// Fast is a backoff for tests: 1 ms doubling up to 4 ms, jitter 0.5.
func Fast() wait.Backoff {
	return wait.Backoff{Duration: time.Millisecond, Factor: 2, Jitter: 0.5, Steps: 1 << 30, Cap: 4 * time.Millisecond}
}
