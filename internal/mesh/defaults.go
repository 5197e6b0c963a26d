package mesh

import (
	"fmt"
	"strings"

	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// Defaults returns a profile's built-in settings.
func Defaults(name string) (Config, error) {
	def, ok := profileDefaults[name]
	if !ok {
		return Config{}, fmt.Errorf("unknown mesh profile %q (want one of %s)", name, strings.Join(Profiles, ", "))
	}
	return def(), nil
}

// profileDefaults builds each profile's defaults afresh, so no caller
// shares a list with another.
var profileDefaults = map[string]func() Config{
	Linkerd: linkerdDefaults,
	Istio:   istioDefaults,
	Kuma:    kumaDefaults,
	Consul:  consulDefaults,
	Custom: func() Config {
		return profile(false, false, true)
	},
}

// profile is what every profile starts from: redirect mode, no DNS
// capture (each mesh turns it on per pod or mesh-wide), and whether it is
// on, sends the proxy's loopback traffic to inbound, and trusts its
// annotations.
func profile(enabled, loopbackToInbound, trustAnnotations bool) Config {
	return Config{
		Enabled:           ptr(enabled),
		InterceptionMode:  string(rules.Redirect),
		CaptureDNS:        ptr(false),
		LoopbackToInbound: ptr(loopbackToInbound),
		TrustAnnotations:  ptr(trustAnnotations),
	}
}

// proxy sets the sidecar container, the UID and GID it runs as (gid < 0:
// none) and its inbound and outbound ports.
func (c Config) proxy(sidecar string, uid, gid int64, inbound, outbound int) Config {
	c.Sidecar, c.ProxyUID = sidecar, ptr(uid)
	if gid >= 0 {
		c.ProxyGID = ptr(gid)
	}
	c.InboundPort, c.OutboundPort = inbound, outbound
	return c
}

func linkerdDefaults() Config {
	c := profile(true, false, false).proxy("linkerd-proxy", 2102, -1, 4143, 4140)
	// The proxy's control and admin ports, in that order: the chart reads
	// them as linkerd2-cni's proxyControlPort and proxyAdminPort defaults.
	c.IgnoreInbound = []string{"4190", "4191"}
	return c
}

func istioDefaults() Config {
	// The proxy's UID (an explicit runAsUser is kept by the injector;
	// OpenShift assigns one) and a mesh-wide DNS capture (proxy env) are
	// in the spec only: the annotations are not trusted.
	c := profile(true, true, false).proxy("istio-proxy", 1337, 1337, 15006, 15001)
	c.TunnelPort, c.DNSPort = 15008, 15053
	c.IgnoreInbound = []string{"15020", "15021", "15090"}
	// Istio's CNI plugin: excludeOutboundPorts defaults to the status port
	// (cni/pkg/plugin/sidecar_redirect.go).
	c.IgnoreOutbound = []string{"15020"}
	return c
}

func kumaDefaults() Config {
	// kumahq/kuma internal/config/plugins/runtime/k8s/config.go (sidecar
	// uid/gid 5678, redirect ports 15006/15001, builtin DNS 15053).
	// kuma-validation checks the proxy's loopback-to-inbound rule;
	// kuma.io/sidecar-injected is written in init-container mode too: the
	// spec tells the modes apart.
	c := profile(false, true, false).proxy("kuma-sidecar", 5678, 5678, 15006, 15001)
	c.DNSPort = 15053
	return c
}

func consulDefaults() Config {
	// hashicorp/consul-k8s connect-inject: consul-dataplane runs as
	// 5995:5995, inbound 20000, outbound 15001, DNS proxy 8600. A pod's
	// own redirect configuration overrides every port and the UID; that
	// annotation exists in CNI mode only and carries the UID the injector
	// gave the proxy, so it is trusted.
	c := profile(false, false, true).proxy("consul-dataplane", 5995, 5995, 20000, 15001)
	c.DNSPort = 8600
	return c
}
