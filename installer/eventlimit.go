package main

import (
	"sync"
	"time"
)

// The per-reason budget of Events: a burst, then one per interval.
const (
	eventBurst = 25
	eventEvery = 10 * time.Second
)

// reasonLimiter is a token bucket per Event reason, so a storm of one
// reason (many pods failing ADD at once) costs the API server a bounded
// number of writes and cannot crowd out the others.
type reasonLimiter struct {
	burst int
	every time.Duration
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newReasonLimiter(burst int, every time.Duration) *reasonLimiter {
	return &reasonLimiter{burst: burst, every: every, now: time.Now, buckets: map[string]*bucket{}}
}

// allow takes a token of reason's bucket if it has one.
func (l *reasonLimiter) allow(reason string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b, ok := l.buckets[reason]
	if !ok {
		b = &bucket{tokens: float64(l.burst), last: now}
		l.buckets[reason] = b
	}
	b.tokens += float64(now.Sub(b.last)) / float64(l.every)
	if b.tokens > float64(l.burst) {
		b.tokens = float64(l.burst)
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
