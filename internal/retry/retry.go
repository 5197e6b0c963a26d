// Package retry runs a call again after failures on apimachinery's
// exponential backoff with jitter, so the agents of many nodes that lost
// the API server at the same moment do not all come back at the same
// moments.
package retry

import (
	"context"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Jitter is the random share added to every wait: a wait of d lasts
// between d and 1.5·d.
const Jitter = 0.5

// Backoff is the schedule of the agent's API retries: 1 s, doubling up to
// max, each wait stretched by up to Jitter at random. It never runs out of
// steps: once at max, every wait is max plus its jitter.
func Backoff(max time.Duration) wait.Backoff {
	return wait.Backoff{Duration: time.Second, Factor: 2, Jitter: Jitter, Steps: math.MaxInt32, Cap: max}
}

// Until calls f until it returns nil or ctx ends, and then returns ctx's
// error (nil when f succeeded). After each failure, failed (when not nil)
// gets the error and the wait before the next call, before that wait.
func Until(ctx context.Context, b wait.Backoff, f func(context.Context) error, failed func(err error, next time.Duration)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var last error
	next := b.DelayFunc()
	delay := func() time.Duration {
		d := next()
		if failed != nil {
			failed(last, d)
		}
		return d
	}
	return wait.DelayFunc(delay).Until(ctx, true, true, func(ctx context.Context) (bool, error) {
		last = f(ctx)
		return last == nil, nil
	})
}
