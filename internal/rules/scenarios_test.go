package rules

import (
	"fmt"
	"net/netip"
	"strings"
)

// scenario is one golden-tested Spec.
type scenario struct {
	name string
	spec Spec
}

func pfx(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

func ports(ss ...string) []PortRange {
	out := []PortRange{}
	for _, s := range ss {
		var a, b uint16
		if n, _ := fmt.Sscanf(s, "%d-%d", &a, &b); n == 2 {
			out = append(out, PortRange{a, b})
			continue
		}
		fmt.Sscanf(s, "%d", &a)
		out = append(out, PortRange{a, a})
	}
	return out
}

func u32(v uint32) *uint32 { return &v }

var v4, v6, dual = []Family{IPv4}, []Family{IPv6}, []Family{IPv4, IPv6}

func linkerdSpec(f []Family) Spec {
	return Spec{Mesh: "linkerd", Families: f, ProxyUID: 2102, InboundPort: 4143, OutboundPort: 4140,
		Mode: Redirect, IgnoreInbound: ports("4190", "4191")}
}

func istioSpec(f []Family) Spec {
	return Spec{Mesh: "istio", Families: f, ProxyUID: 1337, ProxyGID: u32(1337), InboundPort: 15006, OutboundPort: 15001,
		TunnelPort: 15008, Mode: Redirect, IgnoreInbound: ports("15020", "15021", "15090"), DNSPort: 15053, LoopbackToInbound: true,
		IgnoreOutboundFirst: true}
}

func scenarios() []scenario {
	with := func(s Spec, f func(*Spec)) Spec { f(&s); return s }
	many := make([]string, 0, 24)
	for p := 1000; p < 1040; p += 2 {
		many = append(many, fmt.Sprint(p))
	}
	many = append(many, "2000-2100", "3000-3100", "4000-4100")
	return []scenario{
		{"linkerd-default", linkerdSpec(v4)},
		{"linkerd-skip", with(linkerdSpec(v4), func(s *Spec) {
			s.ProxyUID, s.ProxyGID = 2103, u32(2104)
			s.IgnoreInbound = append(s.IgnoreInbound, ports("25", "3306", "8000-8100")...)
			s.IgnoreOutbound = ports("443", "6443")
			s.SkipSubnets = pfx("10.96.0.0/12", "192.168.0.0/16")
		})},
		{"istio-default", istioSpec(v4)},
		{"istio-include-exclude", with(istioSpec(v4), func(s *Spec) {
			s.InboundPorts = ports("8080", "9090")
			s.IgnoreOutbound = ports("5555", "6666")
			s.IncludeSubnets = pfx("10.0.0.0/8", "172.16.0.0/12")
			s.SkipOutboundSubnets = pfx("10.1.0.0/16")
			s.IncludeOutbound = ports("443")
		})},
		{"istio-no-inbound", with(istioSpec(v4), func(s *Spec) {
			s.InboundPorts = []PortRange{}
			s.IncludeSubnets = []netip.Prefix{}
			s.IncludeOutbound = ports("3306")
		})},
		{"istio-tproxy", with(istioSpec(dual), func(s *Spec) { s.Mode = TProxy })},
		{"istio-tproxy-ports", with(istioSpec(v4), func(s *Spec) {
			s.Mode = TProxy
			s.InboundPorts = ports("8080")
			s.SkipSubnets = pfx("10.0.0.0/8")
			s.ExcludeIfaces = []string{"net1"}
		})},
		// Excluded outbound ports, 53 too: TCP and UDP, ahead of DNS capture.
		{"istio-dns", with(istioSpec(v4), func(s *Spec) { s.CaptureDNS, s.IgnoreOutbound = true, ports("53", "15020") })},
		{"exclude-interfaces", with(istioSpec(dual), func(s *Spec) { s.ExcludeIfaces = []string{"net1", "eth1"} })},
		{"custom", Spec{Mesh: "custom", Families: v4, ProxyUID: 1000, InboundPort: 9000, OutboundPort: 9001,
			Mode: Redirect, CaptureDNS: true, DNSPort: 5353, IgnoreInbound: ports("9901")}},
		{"ipv6-only", with(istioSpec(v6), func(s *Spec) {
			s.IncludeSubnets = pfx("10.0.0.0/8") // nothing of IPv6: redirect no IPv6 destination by subnet
			s.IncludeOutbound = ports("443")
			s.SkipOutboundSubnets = pfx("192.168.0.0/16") // nothing of IPv6: skip nothing
		})},
		{"dual-stack", with(linkerdSpec(dual), func(s *Spec) {
			s.SkipSubnets = pfx("10.96.0.0/12", "fd00:10:96::/112")
			s.IncludeSubnets = pfx("10.0.0.0/8", "2001:db8::/32")
		})},
		// Kuma's DNS proxy serves UDP only, and its per-UID exclusions
		// come before DNS capture.
		{"kuma-default", Spec{Mesh: "kuma", Families: dual, ProxyUID: 5678, ProxyGID: u32(5678), InboundPort: 15006,
			OutboundPort: 15001, Mode: Redirect, LoopbackToInbound: true, CaptureDNS: true, DNSPort: 15053,
			DNSUDPOnly: true, ExemptDNS: true, IgnoreInbound: ports("9001", "9901"), IgnoreOutbound: ports("9901"),
			LoopbackAddrs: pfx("::6/128")}},
		// traffic.kuma.io/drop-invalid-packets: conntrack INVALID dropped
		// in mangle PREROUTING; IPv4 only: no ::6 on lo.
		{"kuma-drop-invalid", Spec{Mesh: "kuma", Families: v4, ProxyUID: 5678, InboundPort: 15006, OutboundPort: 15001,
			Mode: Redirect, LoopbackToInbound: true, DNSUDPOnly: true, ExemptDNS: true, DropInvalid: true,
			LoopbackAddrs: pfx("::6/128")}},
		{"kuma-exclusions", Spec{Mesh: "kuma", Families: dual, ProxyUID: 5678, InboundPort: 15006, OutboundPort: 15001,
			Mode: Redirect, LoopbackToInbound: true, CaptureDNS: true, DNSPort: 15053, DNSUDPOnly: true, ExemptDNS: true,
			SkipInboundSources: pfx("10.10.0.0/16", "fd00:10::/64"), SkipOutboundSubnets: pfx("10.20.0.0/16"),
			ExemptUIDs: []UIDExemption{{First: 1000, Last: 1000}, {First: 2000, Last: 2999, Proto: TCP, Ports: ports("22", "443")},
				{First: 3000, Last: 3000, Ports: ports("53")}}}},
		// Consul: DNS to its local resolver only, whoever sends it, the
		// proxy too (before its RETURN); the connect-inject init
		// container's UID after it.
		{"consul-default", Spec{Mesh: "consul", Families: dual, ProxyUID: 5995, ProxyGID: u32(5995), InboundPort: 20000,
			OutboundPort: 15001, Mode: Redirect, CaptureDNS: true, DNSPort: 8600, DNSDest: pfx("127.0.0.1/32"), DNSFirst: true,
			IgnoreInbound: ports("20200"), ExemptUIDs: []UIDExemption{{First: 5996, Last: 5996}}}},
		{"many-ports", with(linkerdSpec(dual), func(s *Spec) {
			s.IgnoreInbound = ports(many...)
			s.IgnoreOutbound = ports(many...)
			s.InboundPorts = ports(append(many, "80", "443")...)
		})},
	}
}

// render is a scenario's golden text: both renderings.
func render(rs RuleSet) string {
	var b strings.Builder
	for _, f := range []Family{IPv4, IPv6} {
		fmt.Fprintf(&b, "# %s: iptables-restore --noflush\n%s\n", f, IptablesRestore(rs, f))
	}
	fmt.Fprintf(&b, "# nft -f\n%s", Nft(rs))
	for _, pr := range rs.PolicyRoutes {
		fmt.Fprintf(&b, "\n# policy route: fwmark %d lookup %d; local default dev lo table %d\n", pr.Mark, pr.Table, pr.Table)
	}
	for _, a := range rs.LoopbackAddrs {
		fmt.Fprintf(&b, "\n# ip addr add %s dev lo\n", a)
	}
	return b.String()
}
