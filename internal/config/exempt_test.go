package config

import "testing"

// TestExemptOnlyAgentPods: the agent's namespace exempts the agent's own
// pods (by name prefix), not every pod in it; the prefix exempts nothing
// in another namespace. A pod wrongly exempt runs unredirected.
func TestExemptOnlyAgentPods(t *testing.T) {
	for _, tc := range []struct {
		conf, ns, name, want string
	}{
		{`{"excludeNamespaces":[]}`, "mesh-cni", "mesh-cni-x7k2p", "agent-pod"},
		{`{"excludeNamespaces":[]}`, "mesh-cni", "web-1", ""},
		{`{"excludeNamespaces":[]}`, "mesh-cni", "mesh-cn", ""},
		{`{"excludeNamespaces":[]}`, "mesh-cni", "x-mesh-cni-1", ""},
		{`{"excludeNamespaces":[]}`, "shop", "mesh-cni-x7k2p", ""},
		{`{"excludeNamespaces":["kube-system"],"agentNamespace":"ops","agentPodPrefix":"node-agent-"}`, "ops", "node-agent-abc", "agent-pod"},
		{`{"excludeNamespaces":["kube-system"],"agentNamespace":"ops","agentPodPrefix":"node-agent-"}`, "ops", "mesh-cni-abc", ""},
		{`{"excludeNamespaces":["kube-system"],"agentNamespace":"ops","agentPodPrefix":"node-agent-"}`, "ops", "db-0", ""},
		{`{"excludeNamespaces":["kube-system"],"agentNamespace":"ops","agentPodPrefix":"node-agent-"}`, "mesh-cni", "node-agent-abc", ""},
		{`{"excludeNamespaces":["kube-system"],"agentNamespace":"ops","agentPodPrefix":"node-agent-"}`, "kube-system", "coredns-1", "excluded-namespace"},
		// By default only kube-system is excluded as a whole; in the
		// agent's namespace only the agent's pods are exempt.
		{`{}`, "mesh-cni", "web-1", ""},
		{`{}`, "mesh-cni", "mesh-cni-x7k2p", "agent-pod"},
		{`{}`, "kube-system", "coredns-1", "excluded-namespace"},
		{`{"agentNamespace":"istio-system","agentPodPrefix":"mesh-cni-"}`, "istio-system", "istiod-5d8f", ""},
	} {
		c, err := Parse([]byte(tc.conf))
		if err != nil {
			t.Fatalf("%s: %v", tc.conf, err)
		}
		if got := c.Exempt(tc.ns, tc.name); got != tc.want {
			t.Errorf("%s: Exempt(%s, %s) = %q, want %q", tc.conf, tc.ns, tc.name, got, tc.want)
		}
	}
}
