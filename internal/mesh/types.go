// Package mesh knows each mesh's pod contract: which pods carry a sidecar,
// and what their annotations ask of the redirect.
package mesh

// Profile names.
const (
	Linkerd = "linkerd"
	Istio   = "istio"
	Kuma    = "kuma"
	Consul  = "consul"
	Custom  = "custom"
)

// Config is one mesh's settings in the plugin config ("meshes": {name: Config}).
// Zero values are filled from the profile's defaults; a pod's annotations
// override them per pod. Lists are written with omitzero, not omitempty:
// an empty list ([], which clears a default list) must survive encoding.
// Every key's meaning and accepted values are in internal/config (MeshSettings).
type Config struct {
	Enabled          *bool    `json:"enabled,omitempty"`
	Sidecar          string   `json:"sidecar,omitempty"`          // container name that marks a meshed pod
	SelectAnnotation string   `json:"selectAnnotation,omitempty"` // custom: annotation key (or key=value) that marks a meshed pod
	ProxyUID         *int64   `json:"proxyUID,omitempty"`
	ProxyGID         *int64   `json:"proxyGID,omitempty"`
	InboundPort      int      `json:"inboundPort,omitempty"`
	OutboundPort     int      `json:"outboundPort,omitempty"`
	TunnelPort       int      `json:"tunnelPort,omitempty"` // inbound port never redirected (istio HBONE)
	DNSPort          int      `json:"dnsPort,omitempty"`    // where captured DNS goes
	InboundPorts     []string `json:"portsToRedirect,omitzero"`
	IgnoreInbound    []string `json:"ignoreInboundPorts,omitzero"`
	IgnoreOutbound   []string `json:"ignoreOutboundPorts,omitzero"`
	IncludeOutbound  []string `json:"includeOutboundPorts,omitzero"`
	SkipSubnets      []string `json:"skipSubnets,omitzero"` // inbound sources, as Linkerd's skip-subnets
	// SkipOutboundSubnets: outbound destinations never redirected. A
	// mesh's own per-pod exclusion (Istio excludeOutboundIPRanges, Kuma,
	// Consul) replaces it.
	SkipOutboundSubnets []string `json:"skipOutboundSubnets,omitzero"`
	IncludeSubnets      []string `json:"includeSubnets,omitzero"`
	ExcludeIfaces       []string `json:"excludeInterfaces,omitzero"`
	InterceptionMode    string   `json:"interceptionMode,omitempty"` // REDIRECT or TPROXY
	CaptureDNS          *bool    `json:"captureDNS,omitempty"`
	// LoopbackToInbound sends the proxy's own connections to a local,
	// non-loopback address to the inbound port (istio, kuma: true).
	LoopbackToInbound *bool `json:"proxyLoopbackToInbound,omitempty"`
	// TrustAnnotations lets annotations alone mark a pod meshed where the
	// mesh's contract is really the pod spec (linkerd: linkerd.io/proxy-version
	// without a look at the init containers). Only safe when every pod of
	// the mesh is injected for CNI mode.
	TrustAnnotations *bool `json:"trustAnnotations,omitempty"`
}

// Pod is what the plugin knows of a pod: always its annotations (from the
// runtime), and its containers when they came from the agent or the API.
type Pod struct {
	Namespace      string            `json:"namespace"`
	Name           string            `json:"name"`
	UID            string            `json:"uid,omitempty"` // metadata.uid, when it came from the agent or the API
	Labels         map[string]string `json:"labels,omitempty"`
	Annotations    map[string]string `json:"annotations,omitempty"`
	Containers     []Container       `json:"containers,omitempty"`
	InitContainers []Container       `json:"initContainers,omitempty"`
	// SpecKnown is true when Containers/InitContainers are filled in.
	SpecKnown bool `json:"specKnown"`
}

// Container is the part of a container spec that decides redirection.
type Container struct {
	Name          string            `json:"name"`
	RunAsUser     *int64            `json:"runAsUser,omitempty"`
	RunAsGroup    *int64            `json:"runAsGroup,omitempty"`
	Env           map[string]string `json:"env,omitempty"`
	Args          []string          `json:"args,omitempty"`
	RestartPolicy string            `json:"restartPolicy,omitempty"` // "Always" on a native sidecar
}
