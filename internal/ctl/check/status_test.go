package check

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/mesh-cni/mesh-cni/internal/agent"
	"github.com/mesh-cni/mesh-cni/internal/agent/install"
	"github.com/mesh-cni/mesh-cni/internal/node"
)

// What the agent publishes is what the checks read.
func TestAgentStatusMatchesAgent(t *testing.T) {
	if StatusAnnotation != agent.StatusAnnotation {
		t.Fatalf("annotation %q, the agent writes %q", StatusAnnotation, agent.StatusAnnotation)
	}
	if RefusedReason != install.ErrRefused.Error() || RefusedEventReason != agent.ReasonRefused {
		t.Fatalf("refusal %q/%q, the agent says %q/%q", RefusedReason, RefusedEventReason, install.ErrRefused, agent.ReasonRefused)
	}
	at := time.Date(2026, 11, 22, 5, 0, 0, 0, time.UTC)
	in := agent.Status{Ready: true, Reason: "r", Others: []string{"istio-cni"}, Marker: node.Marker{Version: "v1", Backend: "nftables",
		Binary: "/opt/cni/bin/mesh-cni", Conf: "/etc/cni/net.d/10-kindnet.conflist", Kubeconfig: "/var/lib/mesh-cni/kubeconfig", Time: at}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	st, err := agentStatus(nodeWith(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if st.Marker != in.Marker || st.Ready != in.Ready || st.Reason != in.Reason || !slices.Equal(st.Others, in.Others) {
		t.Errorf("read %+v from %s", *st, b)
	}
}
