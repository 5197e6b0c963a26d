// Package finding is what a read-only comparison of a pod's netns with a
// rule set reports: each expected rule present or missing, and each of our
// rules the rule set does not have as extra. The backends fill it in; the
// agent serves it and mesh-cnictl prints it.
package finding

// States of a Finding.
const (
	Present = "present"
	Missing = "missing"
	Extra   = "extra"
)

// Finding is one rule (or chain, or policy route) of ours.
type Finding struct {
	// Family is ipv4 or ipv6 (iptables: one table per family), or inet
	// (nftables: one table for both).
	Family string `json:"family"`
	Table  string `json:"table"`
	Chain  string `json:"chain,omitempty"`
	// Rule is the rule as explain prints it (an "nft -f" statement or an
	// iptables-restore line), or "chain NAME" for the chain itself.
	Rule  string `json:"rule"`
	State string `json:"state"`
}

// Count counts the findings in state s.
func Count(fs []Finding, s string) int {
	n := 0
	for _, f := range fs {
		if f.State == s {
			n++
		}
	}
	return n
}

// Report is the agent's answer about one pod (GET Path).
type Report struct {
	Pod  string `json:"pod"`
	Node string `json:"node"`
	// Decision is what ADD decides for the pod with the node's chain
	// entry: redirect or skip; Reason says why when it skips.
	Decision string `json:"decision"`
	Reason   string `json:"reason,omitempty"`
	// Netns is the pod's netns file (its name in the runtime's netns
	// dir) and Scanned how many files were looked at to find it.
	Netns   string `json:"netns,omitempty"`
	Scanned int    `json:"scanned"`
	// Backend is the one that read the netns.
	Backend  string    `json:"backend,omitempty"`
	Findings []Finding `json:"findings"`
	// Truncated: more findings than MaxFindings; the rest are left out.
	Truncated bool `json:"truncated,omitempty"`
}

// Path is the endpoint's path on the agent's pod-rules listener; it takes
// namespace, name and uid of the pod as query parameters.
const Path = "/pod-rules"

// PortName is the pod-rules container's port the chart names for it, which
// mesh-cnictl looks up to reach it through the API server's pods/proxy.
const PortName = "pod-rules"

// MaxFindings bounds a report (a pod's rule set has tens of rules).
const MaxFindings = 2000
