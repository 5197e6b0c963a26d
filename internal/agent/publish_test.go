package agent

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/retrytest"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// A failed Publish is retried on the jittered, capped backoff; a newer
// status starts the backoff over and is the one published.
func TestPublishRetryBackoff(t *testing.T) {
	var rlog retrytest.Log
	b := retrytest.Fast()
	var mu sync.Mutex
	var tried []string
	var a *Agent
	a = New(Options{
		PublishBackoff: b,
		Log:            rlog.Logger(),
		Publish: func(_ context.Context, st Status) error {
			mu.Lock()
			defer mu.Unlock()
			tried = append(tried, st.Reason)
			n := 0
			for _, r := range tried {
				if r == st.Reason {
					n++
				}
			}
			switch {
			case st.Reason == "first" && n == 5:
				a.publishCh <- Status{Reason: "second"}
			case st.Reason == "second" && n == 6:
				return nil
			}
			return errors.New("API down")
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.publishLoop(ctx) }()
	defer func() { cancel(); <-done }()
	a.publishCh <- Status{Reason: "first"}

	deadline := time.Now().Add(testenv.Timeout())
	for {
		mu.Lock()
		n := len(tried)
		mu.Unlock()
		if n == 11 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("publish tried %d times, want 11: %v", n, tried)
		}
		time.Sleep(time.Millisecond)
	}
	d := rlog.Delays()
	if len(d) != 10 {
		t.Fatalf("logged %d waits, want 10 (5 per status, the last one succeeded): %v", len(d), d)
	}
	retrytest.Check(t, b, d[:5])
	retrytest.Check(t, b, d[5:]) // from the start again
	time.Sleep(10 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(tried) != 11 || tried[10] != "second" {
		t.Fatalf("tried %v, want 5 first then 6 second and no more", tried)
	}
}

// Cancelling ends the loop during a retry's wait.
func TestPublishRetryCancel(t *testing.T) {
	b := retrytest.Fast()
	b.Duration, b.Cap = time.Hour, time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	a := New(Options{
		PublishBackoff: b,
		Log:            new(retrytest.Log).Logger(),
		Publish: func(context.Context, Status) error {
			calls++
			cancel()
			return errors.New("API down")
		},
	})
	a.publishCh <- Status{Reason: "x"}
	done := make(chan struct{})
	go func() { defer close(done); a.publishLoop(ctx) }()
	testenv.Receive(t, done, "publishLoop still running after cancel")
	if calls != 1 {
		t.Fatalf("Publish called %d times, want 1", calls)
	}
}
