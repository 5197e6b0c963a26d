package check

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/mesh-cni/mesh-cni/internal/node"
)

// StatusAnnotation is the Node annotation each agent keeps up to date.
const StatusAnnotation = "mesh-cni.io/agent-status"

// RefusedReason starts the reason of an agent that will not chain (the
// settings do not validate or the node cannot run them), and
// RefusedEventReason is the reason of the Warning Event it puts on the
// Node. Both are the agent's (install.ErrRefused, agent.ReasonRefused),
// restated so the CLI does not link the agent.
const (
	RefusedReason      = "refusing to chain"
	RefusedEventReason = "MeshCNIConfigRefused"
)

// AgentStatus is the annotation's JSON: the readiness marker's fields
// (version, backend, binary, conf, kubeconfig, time) plus whether the agent
// is ready and, when not, why, and when ready the chain entry in force
// (compact JSON, as the plugin reads it).
type AgentStatus struct {
	node.Marker
	Ready  bool            `json:"ready"`
	Reason string          `json:"reason,omitempty"`
	Entry  json.RawMessage `json:"entry,omitempty"`
	// Others names the other mesh CNI plugins the agent found chained
	// beside mesh-cni in the node's primary config.
	Others []string `json:"others,omitempty"`
}

// ParseAgentStatus reads a Node's status annotation: nil, nil when the
// node carries none.
func ParseAgentStatus(n *corev1.Node) (*AgentStatus, error) { return agentStatus(n) }

// agentStatus returns nil, nil when the node carries no annotation.
func agentStatus(n *corev1.Node) (*AgentStatus, error) {
	raw, ok := n.Annotations[StatusAnnotation]
	if !ok {
		return nil, nil
	}
	var st AgentStatus
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		return nil, fmt.Errorf("%s is not valid JSON: %w", StatusAnnotation, err)
	}
	return &st, nil
}

// problem says what keeps a status from counting as ready, or "".
func (st *AgentStatus) problem() string {
	if !st.Ready {
		if st.Reason != "" {
			return "not ready: " + st.Reason
		}
		return "not ready"
	}
	var missing []string
	for _, f := range []struct{ name, v string }{
		{"binary", st.Binary}, {"chain entry", st.Conf}, {"kubeconfig", st.Kubeconfig}, {"backend", st.Backend},
	} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return "ready but reports no " + strings.Join(missing, ", ")
	}
	return ""
}
