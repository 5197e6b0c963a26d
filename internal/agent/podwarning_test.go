package agent

import (
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/node"
)

func TestPodWarning(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ev     node.Event
		reason string // "" for no Event
		says   string
	}{
		{"failed ADD", node.Event{Command: "ADD", Decision: "failed", Reason: "invalid-annotation", Namespace: "a", Pod: "p",
			Message: `annotation config.linkerd.io/skip-outbound-ports="http": invalid port`}, EventAddFailed, "skip-outbound-ports"},
		{"failed DEL", node.Event{Command: "DEL", Decision: "failed", Namespace: "a", Pod: "p", Message: "remove rules"}, EventDelFailed, "remove rules"},
		{"fallback", node.Event{Command: "ADD", Decision: "meshed", Fallback: "iptables-legacy", Namespace: "a", Pod: "p"}, EventBackendFallback, "iptables-legacy"},
		{"auto fallback", node.Event{Command: "ADD", Decision: "meshed", Backend: "iptables-legacy", Fallback: "nftables", Namespace: "a", Pod: "p"},
			"", ""},
		{"unknown fallback value", node.Event{Command: "ADD", Decision: "meshed", Fallback: "x", Namespace: "a", Pod: "p"}, "", ""},
		{"skipped", node.Event{Command: "ADD", Decision: "skipped", Reason: "no-sidecar", Namespace: "a", Pod: "p"}, "", ""},
		{"meshed", node.Event{Command: "ADD", Decision: "meshed", Namespace: "a", Pod: "p"}, "", ""},
		{"no pod", node.Event{Command: "ADD", Decision: "failed", Message: "x"}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reason, msg, ok := PodWarning(tc.ev)
			if ok != (tc.reason != "") || reason != tc.reason || !strings.Contains(msg, tc.says) {
				t.Fatalf("got (%q, %q, %v), want reason %q saying %q", reason, msg, ok, tc.reason, tc.says)
			}
		})
	}
	long := node.Event{Command: "ADD", Decision: "failed", Namespace: "a", Pod: "p", Message: strings.Repeat("x", 10000)}
	if _, msg, _ := PodWarning(long); len(msg) > maxEventMessage+200 {
		t.Errorf("message of %d bytes", len(msg))
	}
}
