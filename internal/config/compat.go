package config

import "maps"

// CompatKey is a linkerd2-cni chart value that sets a key of the linkerd
// profile: the chart's schema takes its bounds from that key (MeshKeys),
// so helm refuses what the agent would refuse and nothing else.
type CompatKey struct {
	Name    string // the linkerd2-cni value
	MeshKey string // the key of meshes.linkerd it sets
	// Item, for a value that sets no key of its own: it is this item of
	// meshes.linkerd.ignoreInboundPorts (a port).
	Item string
}

// CompatKeys are the linkerd2-cni values that map to one mesh key; the
// port lists (ignoreInboundPorts, ...) keep their own definition in the
// chart's schema, as they also take linkerd2-cni's comma strings.
var CompatKeys = []CompatKey{
	{"inboundProxyPort", "inboundPort", ""},
	{"outboundProxyPort", "outboundPort", ""},
	{"proxyUID", "proxyUID", ""},
	{"proxyGID", "proxyGID", ""},
	{"proxyControlPort", "", "the first"},
	{"proxyAdminPort", "", "the second"},
}

// compatSchema is the schema of a CompatKey: its mesh key's type and
// value bounds.
func compatSchema(c CompatKey) map[string]any {
	if c.MeshKey == "" {
		s := maps.Clone(portNumber)
		s["description"] = "linkerd2-cni's port, " + c.Item + " of meshes.linkerd.ignoreInboundPorts when ignoreInboundPorts is set"
		return s
	}
	k := meshKey(c.MeshKey)
	s := maps.Clone(k.Type)
	maps.Copy(s, k.Value)
	s["description"] = "linkerd2-cni's name for meshes.linkerd." + c.MeshKey
	return s
}
