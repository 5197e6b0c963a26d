package main

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// A storm of one reason gets the burst, then one per interval; another
// reason keeps its own budget.
func TestReasonLimiter(t *testing.T) {
	now := time.Unix(0, 0)
	l := newReasonLimiter(5, 10*time.Second)
	l.now = func() time.Time { return now }
	allowed := func(reason string, n int) int {
		k := 0
		for i := 0; i < n; i++ {
			if l.allow(reason) {
				k++
			}
		}
		return k
	}
	if got := allowed("MeshCNIAddFailed", 1000); got != 5 {
		t.Errorf("storm of 1000: %d allowed, want the burst of 5", got)
	}
	if got := allowed("MeshCNIRechained", 3); got != 3 {
		t.Errorf("another reason during the storm: %d of 3 allowed", got)
	}
	now = now.Add(25 * time.Second)
	if got := allowed("MeshCNIAddFailed", 1000); got != 2 {
		t.Errorf("25s later: %d allowed, want 2", got)
	}
	now = now.Add(time.Hour)
	if got := allowed("MeshCNIAddFailed", 1000); got != 5 {
		t.Errorf("an hour later: %d allowed, want the burst of 5 again", got)
	}
}

// events.k8s.io/v1 refuses a note over 1 kB: longer ones are cut, on a
// rune boundary.
func TestBoundedNote(t *testing.T) {
	for _, s := range []string{strings.Repeat("x", 5000), strings.Repeat("é", 700), "short"} {
		b := bounded(s, maxNote)
		if len(b) > maxNote || !utf8.ValidString(b) || (len(s) <= maxNote && b != s) {
			t.Errorf("bounded(%d bytes) = %d bytes, valid UTF-8 %v", len(s), len(b), utf8.ValidString(b))
		}
	}
}
