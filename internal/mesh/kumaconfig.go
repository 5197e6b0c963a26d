package mesh

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	"github.com/mesh-cni/mesh-cni/internal/rules"
	"sigs.k8s.io/yaml"
)

// kumaConfig is the part of Kuma's transparent-proxy config (the YAML its
// injector writes into traffic.kuma.io/transparent-proxy-config; kumahq/kuma
// pkg/transparentproxy/config/config.go) that decides the rules. Other
// keys (retries, logging, executables) are Kuma's own and are ignored, as
// kuma-cni's reader does; an omitted key keeps the profile's setting.
type kumaConfig struct {
	KumaDPUser         *string `json:"kumaDPUser"`
	IPFamilyMode       *string `json:"ipFamilyMode"`
	DropInvalidPackets *bool   `json:"dropInvalidPackets"` // config.go:561
	Redirect           struct {
		Inbound  kumaFlow `json:"inbound"`
		Outbound kumaFlow `json:"outbound"`
		DNS      struct {
			Enabled *bool `json:"enabled"`
			Port    *int  `json:"port"`
		} `json:"dns"`
	} `json:"redirect"`
}

type kumaFlow struct {
	Enabled             *bool      `json:"enabled"`
	Port                *int       `json:"port"`
	IncludePorts        *kumaPorts `json:"includePorts"`
	ExcludePorts        *kumaPorts `json:"excludePorts"`
	ExcludePortsForIPs  []string   `json:"excludePortsForIPs"`
	ExcludePortsForUIDs []string   `json:"excludePortsForUIDs"`
}

// kumaPorts is Kuma's port list: a list of numbers or strings, or one
// comma-separated string.
type kumaPorts string

func (p *kumaPorts) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	var items []string
	switch t := v.(type) {
	case nil:
	case string, float64:
		items = []string{fmt.Sprint(t)}
	case []any:
		for _, i := range t {
			switch i.(type) {
			case string, float64:
				items = append(items, fmt.Sprint(i))
			default:
				return fmt.Errorf("port list item %s: want a port", string(b))
			}
		}
	default:
		return fmt.Errorf("port list %s: want a list of ports", string(b))
	}
	*p = kumaPorts(strings.Join(items, ","))
	return nil
}

// kumaConfigSpec applies the config annotation over s. Errors name the
// annotation and the key.
func kumaConfigSpec(s rules.Spec, raw string) (rules.Spec, bool, error) {
	var c kumaConfig
	if err := yaml.Unmarshal([]byte(raw), &c); err != nil {
		return s, false, annErr(KumaConfig, raw, fmt.Errorf("not valid: %w", err))
	}
	bad := func(key string, err error) error { return annErr(KumaConfig, raw, fmt.Errorf("%s: %w", key, err)) }
	var err error
	if c.KumaDPUser != nil && *c.KumaDPUser != "" {
		// In CNI mode the user is a UID; a name cannot be looked up here.
		if s.ProxyUID, err = parseID(*c.KumaDPUser); err != nil {
			return s, false, bad("kumaDPUser", err)
		}
	}
	if c.IPFamilyMode != nil {
		if err := kumaFamilyMode(*c.IPFamilyMode); err != nil {
			return s, false, bad("ipFamilyMode", err)
		}
	}
	r := c.Redirect
	for _, p := range []struct {
		key string
		v   *int
		dst *uint16
	}{{"redirect.inbound.port", r.Inbound.Port, &s.InboundPort}, {"redirect.outbound.port", r.Outbound.Port, &s.OutboundPort}, {"redirect.dns.port", r.DNS.Port, &s.DNSPort}} {
		if p.v == nil || (*p.v == 0 && p.key == "redirect.dns.port") {
			continue
		}
		port, err := checkPort(*p.v, false)
		if err != nil {
			return s, false, bad(p.key, err)
		}
		*p.dst = port
	}
	inbound := r.Inbound.Enabled == nil || *r.Inbound.Enabled
	if s.IgnoreInbound, s.InboundPorts, err = kumaPortLists(r.Inbound, s.IgnoreInbound, s.InboundPorts); err != nil {
		return s, false, bad("redirect.inbound", err)
	}
	var out []rules.PortRange
	if s.IgnoreOutbound, out, err = kumaPortLists(r.Outbound, s.IgnoreOutbound, nil); err != nil {
		return s, false, bad("redirect.outbound", err)
	}
	if out != nil { // only these ports, to any destination
		s.IncludeSubnets, s.IncludeOutbound = []netip.Prefix{}, out
	}
	if r.Outbound.Enabled != nil && !*r.Outbound.Enabled {
		s.IncludeSubnets, s.IncludeOutbound = []netip.Prefix{}, nil
	}
	if s.SkipInboundSources, err = ParseCIDRs(strings.Join(r.Inbound.ExcludePortsForIPs, ",")); err != nil {
		return s, false, bad("redirect.inbound.excludePortsForIPs", err)
	}
	if s.SkipOutboundSubnets, err = ParseCIDRs(strings.Join(r.Outbound.ExcludePortsForIPs, ",")); err != nil {
		return s, false, bad("redirect.outbound.excludePortsForIPs", err)
	}
	if s.ExemptUIDs, err = kumaUIDExclusions(r.Outbound.ExcludePortsForUIDs); err != nil {
		return s, false, bad("redirect.outbound.excludePortsForUIDs", err)
	}
	s.CaptureDNS = r.DNS.Enabled != nil && *r.DNS.Enabled
	s.DropInvalid = c.DropInvalidPackets != nil && *c.DropInvalidPackets
	return s, inbound, nil
}

// kumaPortLists: includePorts, when set, is the only list that counts
// (Kuma ignores excludePorts then); otherwise excludePorts replaces the
// configured ignore list.
func kumaPortLists(f kumaFlow, ignore, include []rules.PortRange) ([]rules.PortRange, []rules.PortRange, error) {
	if f.IncludePorts != nil && *f.IncludePorts != "" {
		in, err := kumaConfigPorts(string(*f.IncludePorts))
		if err != nil {
			return nil, nil, fmt.Errorf("includePorts: %w", err)
		}
		return nil, in, nil
	}
	if f.ExcludePorts == nil {
		return ignore, include, nil
	}
	ex, err := kumaConfigPorts(string(*f.ExcludePorts))
	if err != nil {
		return nil, nil, fmt.Errorf("excludePorts: %w", err)
	}
	return ex, include, nil
}

// kumaConfigPorts reads a port list of the config: single ports only, as
// Kuma's Ports does (pkg/transparentproxy/config/config.go:101-121 and
// parsePort in utils.go:23-31: a range is not a port). Unlike Kuma, an
// empty item between commas is an error here, as in every list.
func kumaConfigPorts(v string) ([]rules.PortRange, error) {
	ps, err := ParsePorts(v)
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		if p.First != p.Last {
			return nil, fmt.Errorf("invalid port %d-%d: Kuma takes single ports, not ranges", p.First, p.Last)
		}
	}
	return ps, nil
}
