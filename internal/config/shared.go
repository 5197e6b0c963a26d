package config

import (
	"encoding/json"
	"strings"
)

// SharedNamespacesFile is the list the chart reads to refuse a shared
// namespace, generated from SharedNamespaces.
const SharedNamespacesFile = "charts/mesh-cni/files/shared-namespaces.json"

// AllowSharedNamespace is the chart value that lets a release go into one
// of SharedNamespaces.
const AllowSharedNamespace = "allowSharedNamespace"

// SharedNamespace is a namespace the chart refuses to install into unless
// AllowSharedNamespace is true, and why.
type SharedNamespace struct {
	Name, Why string
}

// SharedNamespaces are namespaces other components own. Whoever may create
// pods in the release namespace can run them as the agent's ServiceAccount
// (its node writes, its tokens), the namespace must admit privileged pods
// (the agent's host paths), and a pod there named with the agent's prefix
// is exempt from redirection: all of that should reach no one but the
// agent's own installers. linkerd-cni, the namespace docs/linkerd.md
// installs the Linkerd preset into, holds nothing but the CNI agent and
// stays allowed.
var SharedNamespaces = []SharedNamespace{
	{"default", "where workloads land when no namespace is named"},
	{"kube-system", "the cluster's own components (DNS, kube-proxy, the primary CNI)"},
	{"kube-public", "readable by every client, unauthenticated ones too"},
	{"kube-node-lease", "the kubelets' heartbeat Leases"},
	{"istio-system", "Istio's control plane (istiod, istio-cni, gateways)"},
	{"linkerd", "Linkerd's control plane (destination, identity, proxy injector)"},
	{"linkerd-viz", "Linkerd's viz extension, meshed pods"},
	{"kuma-system", "Kuma's control plane"},
	{"kong-mesh-system", "Kong Mesh's control plane (Kuma's distribution)"},
	{"consul", "Consul's servers and injector (consul-k8s's Helm docs)"},
}

// SharedNamespacesJSON is SharedNamespacesFile: the names, one array.
func SharedNamespacesJSON() []byte {
	var names []string
	for _, n := range SharedNamespaces {
		names = append(names, n.Name)
	}
	b, err := json.MarshalIndent(names, "", "  ")
	if err != nil {
		panic(err) // strings always encode
	}
	return append(b, '\n')
}

// ChartValue is a chart value that sets no key of the chain entry but
// whose schema and meaning Go owns.
type ChartValue struct {
	Name   string
	Schema map[string]any
	Doc    string
}

// ChartValues are spliced into the chart's schema with Keys.
var ChartValues = []ChartValue{
	{
		Name:   AllowSharedNamespace,
		Schema: map[string]any{"type": "boolean"},
		Doc: "install into a namespace other components own (" + sharedNames() + ") all the same; " +
			"refused otherwise, as anyone who may create pods there could act as the agent",
	},
}

func sharedNames() string {
	var s []string
	for _, n := range SharedNamespaces {
		s = append(s, "`"+n.Name+"`")
	}
	return strings.Join(s, ", ")
}
