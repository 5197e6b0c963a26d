package agent

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/mesh-cni/mesh-cni/internal/retry"
)

// loadPublished falls back to the Node status for the previous ready time
// when no marker survived.
func (a *Agent) loadPublished(ctx context.Context) {
	a.mu.Lock()
	have := a.prev != nil
	a.mu.Unlock()
	if have || a.o.Published == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	st, err := a.o.Published(ctx)
	if err != nil {
		a.o.Log.Debug("cannot read the published status; a ready time starts now", "err", err)
		return
	}
	if st != nil && st.Ready && !st.Time.IsZero() {
		m := st.Marker
		a.mu.Lock()
		a.prev = &m
		a.mu.Unlock()
	}
}

// publishLoop writes the latest status to the Node, retrying on
// o.PublishBackoff; a newer status replaces one still being retried and
// starts the backoff over.
func (a *Agent) publishLoop(ctx context.Context) {
	b := a.o.PublishBackoff
	if b == (wait.Backoff{}) {
		b = retry.Backoff(30 * time.Second)
	}
	var pending *Status
	next := b.DelayFunc()
	var retryIn time.Duration
	for {
		var again <-chan time.Time
		var t *time.Timer
		if pending != nil {
			t = time.NewTimer(retryIn)
			again = t.C
		}
		select {
		case <-ctx.Done():
			return
		case st := <-a.publishCh:
			pending, next = &st, b.DelayFunc()
		case <-again:
		}
		if t != nil {
			t.Stop()
		}
		if pending == nil {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := a.o.Publish(pctx, *pending)
		cancel()
		if err == nil {
			pending = nil
			continue
		}
		retryIn = next()
		a.o.Log.Warn("cannot publish status on the Node", "err", err, "retry_in", retryIn)
	}
}
