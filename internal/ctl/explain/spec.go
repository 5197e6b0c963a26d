package explain

import (
	"bytes"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"

	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// writeSpec prints the resolved settings, one line each.
func writeSpec(w io.Writer, s rules.Spec) {
	var b bytes.Buffer
	line := func(k, format string, a ...any) {
		fmt.Fprintf(&b, "  %-18s "+format+"\n", append([]any{k + ":"}, a...)...)
	}
	fams := make([]string, len(s.Families))
	for i, f := range s.Families {
		fams[i] = f.String()
	}
	line("families", "%s", strings.Join(fams, ", "))
	line("mode", "%s", s.Mode)
	gid := "none"
	if s.ProxyGID != nil {
		gid = fmt.Sprint(*s.ProxyGID)
	}
	line("proxy uid/gid", "%d/%s (exempt)", s.ProxyUID, gid)
	line("inbound", "to port %d, ports %s, except %s", s.InboundPort, portsOr(s.InboundPorts, "all"), portsOr(withTunnel(s), "none"))
	except := portsOr(s.IgnoreOutbound, "none")
	if s.IgnoreOutboundFirst && len(s.IgnoreOutbound) > 0 {
		except += " (tcp and udp, before DNS capture)"
	}
	line("outbound", "to port %d, except ports %s", s.OutboundPort, except)
	if s.IncludeSubnets != nil {
		line("outbound only to", "%s, or ports %s", prefixesOr(s.IncludeSubnets, "no subnet"), portsOr(s.IncludeOutbound, "none"))
	}
	line("skip subnets", "%s (inbound sources); %s (outbound destinations)", prefixesOr(s.SkipSubnets, "none"), prefixesOr(s.SkipOutboundSubnets, "none"))
	if len(s.ExcludeIfaces) > 0 {
		line("excluded ifaces", "%s", strings.Join(s.ExcludeIfaces, ", "))
	}
	if len(s.SkipInboundSources) > 0 {
		line("skip sources", "%s (inbound)", prefixesOr(s.SkipInboundSources, "none"))
	}
	if len(s.ExemptUIDs) > 0 {
		when := "DNS capture still applies"
		if s.ExemptDNS {
			when = "before DNS capture and the proxy's path to its own pod"
		}
		line("exempt uids", "%s (outbound not redirected; %s)", exemptUIDs(s.ExemptUIDs), when)
	}
	if s.CaptureDNS && s.DNSPort != 0 {
		proto, dst, who := "tcp/udp", "any destination", "every process but the proxy"
		if s.DNSUDPOnly {
			proto = "udp"
		}
		if s.DNSDest != nil {
			dst = prefixesOr(fams6(s.DNSDest, s.Families), "no destination")
		}
		if s.DNSFirst {
			who = "every process, the proxy too"
		}
		if s.ExemptDNS && (len(s.SkipOutboundSubnets) > 0 || len(s.SkipSubnets) > 0) {
			dst += " except the skipped subnets"
		}
		line("dns", "%s 53 to %s, from %s, to port %d", proto, dst, who, s.DNSPort)
	}
	if s.LoopbackToInbound {
		direct := slices.Clone(s.IgnoreOutbound) // returned first or in MESH_PROXY_SELF: direct either way
		if s.TunnelPort != 0 {
			direct = append(direct, rules.PortRange{First: s.TunnelPort, Last: s.TunnelPort})
		}
		if s.CaptureDNS && !s.DNSUDPOnly {
			direct = append(direct, rules.PortRange{First: rules.DNSPort, Last: rules.DNSPort})
		}
		line("proxy to self", "to port %d, except ports %s (the inbound exclusions do not apply)", s.InboundPort, portsOr(direct, "none"))
	}
	if s.DropInvalid {
		line("drop invalid", "conntrack INVALID packets dropped (mangle PREROUTING)")
	}
	if lo := fams6(s.LoopbackAddrs, s.Families); len(lo) > 0 {
		line("lo addresses", "%s added before the rules, left at DEL", prefixesOr(lo, "none"))
	}
	_, _ = w.Write(b.Bytes())
}

// fams6 keeps the prefixes of the families programmed.
func fams6(ps []netip.Prefix, fams []rules.Family) []netip.Prefix {
	out := []netip.Prefix{}
	for _, f := range fams {
		out = append(out, rules.ForFamily(ps, f)...)
	}
	return out
}

// exemptUIDs prints each exemption: "1000", "2000-2999 tcp ports 22,443".
func exemptUIDs(es []rules.UIDExemption) string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = fmt.Sprint(e.First)
		if e.Last > e.First {
			out[i] += fmt.Sprintf("-%d", e.Last)
		}
		if e.Proto != rules.AnyProto {
			out[i] += " " + string(e.Proto)
		}
		if len(e.Ports) > 0 {
			out[i] += " ports " + portsOr(e.Ports, "none")
		}
	}
	return strings.Join(out, ", ")
}

func withTunnel(s rules.Spec) []rules.PortRange {
	out := slices.Clone(s.IgnoreInbound)
	if s.TunnelPort != 0 && s.Mode != rules.TProxy { // Istio exempts it in nat only
		out = append(out, rules.PortRange{First: s.TunnelPort, Last: s.TunnelPort})
	}
	return out
}

func portsOr(ps []rules.PortRange, none string) string {
	if ps == nil {
		return none
	}
	if len(ps) == 0 {
		return "none"
	}
	ps = slices.Clone(ps)
	slices.SortFunc(ps, func(a, b rules.PortRange) int { return int(a.First) - int(b.First) })
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = fmt.Sprint(p.First)
		if p.Last != p.First {
			s[i] += fmt.Sprintf("-%d", p.Last)
		}
	}
	return strings.Join(s, ",")
}

func prefixesOr[T fmt.Stringer](ps []T, none string) string {
	if len(ps) == 0 {
		return none
	}
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}
