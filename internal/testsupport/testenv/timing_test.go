package testenv_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// countdown is work that finishes one item every step of wall-clock time,
// down to floor items that never finish.
func countdown(items, floor int, step time.Duration) func() []string {
	start := time.Now()
	return func() []string {
		n := max(items-int(time.Since(start)/step), floor)
		var left []string
		for i := range n {
			left = append(left, fmt.Sprintf("item-%d", i))
		}
		return left
	}
}

// WaitProgress waits as long as items keep finishing, longer in all than
// its stall bound, and fails once they stop, naming what is left.
func TestWaitProgress(t *testing.T) {
	ctx := context.Background()
	const stall = time.Second
	start := time.Now()
	if err := testenv.WaitProgress(ctx, stall, 10*time.Millisecond, countdown(5, 0, 300*time.Millisecond)); err != nil {
		t.Fatalf("work that kept finishing an item every 300ms: %v", err)
	}
	if took := time.Since(start); took <= stall {
		t.Fatalf("the work was done in %v, not longer than the stall bound %v: the test proves nothing", took, stall)
	}

	start = time.Now()
	err := testenv.WaitProgress(ctx, stall, 10*time.Millisecond, countdown(3, 1, 100*time.Millisecond))
	if err == nil || !strings.Contains(err.Error(), "1 still pending, none done for 1s: item-0") {
		t.Fatalf("one item stuck: got %v, want it named", err)
	}
	if took := time.Since(start); took < stall+200*time.Millisecond {
		t.Fatalf("failed after %v, before the stall bound had passed since the last item finished", took)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := testenv.WaitProgress(cctx, stall, time.Millisecond, countdown(1, 1, time.Hour)); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled wait: got %v, want context.Canceled", err)
	}
}
