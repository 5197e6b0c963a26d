package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ScaleEnv multiplies every test timeout taken from this package, for
// machines slower or busier than usual (e.g. MESH_CNI_TEST_TIMEOUT_SCALE=3).
const ScaleEnv = "MESH_CNI_TEST_TIMEOUT_SCALE"

// DefaultTimeout is how long a test waits for an event that should come in
// well under a second: a margin for a loaded machine, not a speed limit.
const DefaultTimeout = time.Minute

// Scale returns d times the factor in ScaleEnv (1 when unset or invalid).
func Scale(d time.Duration) time.Duration {
	f, err := strconv.ParseFloat(os.Getenv(ScaleEnv), 64)
	if err != nil || f <= 0 {
		return d
	}
	return time.Duration(float64(d) * f)
}

// Timeout is DefaultTimeout, scaled.
func Timeout() time.Duration { return Scale(DefaultTimeout) }

// Eventually polls cond until it returns nil, and fails the test with its
// last error after Timeout().
func Eventually(t testing.TB, what string, cond func() error) {
	t.Helper()
	if err := WaitFor(Timeout(), cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// EventuallyTrue is Eventually for a condition that has no error to tell.
func EventuallyTrue(t testing.TB, what string, ok func() bool) {
	t.Helper()
	Eventually(t, "waiting for "+what, func() error {
		if !ok() {
			return errors.New("not yet")
		}
		return nil
	})
}

// Receive returns what ch delivers (the zero value once it is closed), and
// fails t with msg when nothing comes within Timeout(): the wait for a
// goroutine to return after its context is cancelled.
func Receive[T any](t testing.TB, ch <-chan T, msg string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(Timeout()):
		t.Fatalf("%s (waited %v)", msg, Timeout())
		var zero T
		return zero
	}
}

// WaitFor polls cond until it returns nil or timeout passes; it returns the
// last error then.
func WaitFor(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for wait := time.Millisecond; ; {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not after %v: %w", timeout, err)
		}
		time.Sleep(wait)
		if wait < 100*time.Millisecond {
			wait *= 2
		}
	}
}

// WaitProgress polls pending every poll until it returns nothing, and
// fails only when the number pending has not gone down for stall: work
// served at another component's pace (pods queued behind a restarting
// CNI agent) takes longer on a slower machine, yet one item stuck for
// stall still fails. It returns the items still pending then, or ctx's
// error. The whole wait is at most one stall per item.
func WaitProgress(ctx context.Context, stall, poll time.Duration, pending func() []string) error {
	best, since := -1, time.Now()
	for {
		left := pending()
		if len(left) == 0 {
			return nil
		}
		if best < 0 || len(left) < best {
			best, since = len(left), time.Now()
		}
		if time.Since(since) > stall {
			return fmt.Errorf("%d still pending, none done for %v: %s", len(left), stall, strings.Join(left, "; "))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d still pending: %w: %s", len(left), ctx.Err(), strings.Join(left, "; "))
		case <-time.After(poll):
		}
	}
}

// KillWindow measures how long the work started by start takes on this
// machine until done reports true, over runs unkilled runs, and returns a
// window to sweep kill moments over: twice the median run, so kills land
// before, during and after the work however fast the machine is (the
// median, so one stalled run does not stretch the sweep). stop ends a run
// and undoes its work.
func KillWindow(t testing.TB, runs int, start func(), done func() bool, stop func()) time.Duration {
	t.Helper()
	took := make([]time.Duration, 0, runs)
	for i := 0; i < runs; i++ {
		t0 := time.Now()
		start()
		deadline := t0.Add(Timeout())
		for !done() {
			if time.Now().After(deadline) {
				stop()
				t.Fatalf("unkilled run %d: work not done after %v", i, Timeout())
			}
			time.Sleep(100 * time.Microsecond)
		}
		took = append(took, time.Since(t0))
		stop()
	}
	slices.Sort(took)
	return 2 * took[len(took)/2]
}
