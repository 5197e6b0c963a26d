package retry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mesh-cni/mesh-cni/internal/retry"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/retrytest"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// The agent's schedule: 1 s doubling, capped, jittered, and it does not
// run out of steps at the cap (wait.ExponentialBackoff would stop there).
func TestBackoffSchedule(t *testing.T) {
	b := retry.Backoff(30 * time.Second)
	next := b.DelayFunc()
	var delays []time.Duration
	for range 40 {
		delays = append(delays, next())
	}
	retrytest.Check(t, b, delays)
	if last := delays[len(delays)-1]; last < 30*time.Second {
		t.Errorf("wait 40 is %v, want the cap (30s) plus jitter", last)
	}
}

func TestUntilRetriesUntilSuccess(t *testing.T) {
	b := retrytest.Fast()
	calls := 0
	var delays []time.Duration
	var errs []error
	boom := errors.New("boom")
	err := retry.Until(context.Background(), b, func(context.Context) error {
		if calls++; calls < 7 {
			return boom
		}
		return nil
	}, func(err error, next time.Duration) {
		errs = append(errs, err)
		delays = append(delays, next)
	})
	if err != nil || calls != 7 {
		t.Fatalf("Until = %v after %d calls, want nil after 7", err, calls)
	}
	if len(errs) != 6 || !errors.Is(errs[0], boom) {
		t.Fatalf("failed saw %v, want boom 6 times", errs)
	}
	retrytest.Check(t, b, delays)
}

// A cancel during a wait ends Until at once, with no further call; a
// context already done means no call at all.
func TestUntilCancel(t *testing.T) {
	b := retry.Backoff(time.Hour)
	b.Duration = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	done := make(chan error, 1)
	go func() {
		// the cancel lands during the hour's wait that follows
		done <- retry.Until(ctx, b, func(context.Context) error { calls++; cancel(); return errors.New("no") }, nil)
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || calls != 1 {
			t.Fatalf("Until = %v after %d calls, want context.Canceled after 1", err, calls)
		}
	case <-time.After(testenv.Timeout()):
		t.Fatal("Until did not return after cancel")
	}
	err := retry.Until(ctx, b, func(context.Context) error { calls++; return nil }, nil)
	if !errors.Is(err, context.Canceled) || calls != 1 {
		t.Fatalf("Until on a done context = %v, %d calls; want context.Canceled, none", err, calls-1)
	}
}
