package config

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/mesh-cni/mesh-cni/pkg/mesh"
)

// validateMesh checks one meshes.<name> entry, naming the key and value of
// the first bad one.
func validateMesh(name string, c mesh.Config) error {
	key := func(k string) string { return "meshes." + name + "." + k }
	for k, p := range map[string]int{
		"inboundPort": c.InboundPort, "outboundPort": c.OutboundPort,
		"tunnelPort": c.TunnelPort, "dnsPort": c.DNSPort,
	} {
		if p < 0 || p > 65535 {
			return invalid(key(k), strconv.Itoa(p), "not a port (1-65535)")
		}
	}
	for k, id := range map[string]*int64{"proxyUID": c.ProxyUID, "proxyGID": c.ProxyGID} {
		if id != nil && (*id < 0 || *id > 1<<32-2) {
			return invalid(key(k), strconv.FormatInt(*id, 10), "not a user or group id")
		}
	}
	for k, list := range map[string][]string{
		"portsToRedirect": c.InboundPorts, "ignoreInboundPorts": c.IgnoreInbound,
		"ignoreOutboundPorts": c.IgnoreOutbound, "includeOutboundPorts": c.IncludeOutbound,
	} {
		for _, v := range list {
			if err := checkPorts(v); err != nil {
				return invalid(key(k), v, err.Error())
			}
		}
	}
	for k, list := range map[string][]string{"skipSubnets": c.SkipSubnets, "includeSubnets": c.IncludeSubnets} {
		for _, v := range list {
			if _, err := netip.ParsePrefix(strings.TrimSpace(v)); err != nil {
				return invalid(key(k), v, "not a CIDR such as 10.0.0.0/8 or fd00::/8")
			}
		}
	}
	switch strings.ToUpper(c.InterceptionMode) {
	case "", "REDIRECT", "TPROXY":
	default:
		return invalid(key("interceptionMode"), c.InterceptionMode, "want REDIRECT or TPROXY")
	}
	if name == mesh.Custom && c.Enabled != nil && *c.Enabled {
		if c.Sidecar == "" && c.SelectAnnotation == "" {
			return types.NewError(types.ErrInvalidNetworkConfig,
				"meshes.custom is enabled but has neither sidecar nor selectAnnotation: no pod could be selected", "")
		}
		if c.ProxyUID == nil || c.InboundPort == 0 || c.OutboundPort == 0 {
			return types.NewError(types.ErrInvalidNetworkConfig,
				"meshes.custom is enabled but lacks proxyUID, inboundPort or outboundPort", "")
		}
	}
	return nil
}

// checkPorts accepts "80" and "8000-8100", and comma-separated lists of
// those, as the mesh annotations do.
func checkPorts(s string) error {
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := port(lo)
		if err != nil {
			return err
		}
		if !isRange {
			continue
		}
		last, err := port(hi)
		if err != nil {
			return err
		}
		if last < first {
			return fmt.Errorf("range %s is reversed", part)
		}
	}
	return nil
}

func port(s string) (int, error) {
	p, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || p < 1 || p > 65535 {
		return 0, fmt.Errorf("%q is not a port (1-65535)", s)
	}
	return p, nil
}
