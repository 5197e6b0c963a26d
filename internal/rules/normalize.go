package rules

import (
	"net/netip"
	"slices"
)

// normalize sorts and merges every list so renderings are stable and nft
// anonymous sets never hold overlapping intervals. nil stays nil: it means
// "every" for the include lists.
func normalize(s Spec) Spec {
	s.Families = normFamilies(s.Families)
	if s.Mode == "" {
		s.Mode = Redirect
	}
	if s.CaptureDNS && s.DNSPort == 0 {
		s.CaptureDNS = false
	}
	if s.DNSDest != nil {
		// An empty list (not nil) captures no destination.
		if s.DNSDest = mergePrefixes(s.DNSDest); len(s.DNSDest) == 0 {
			s.CaptureDNS = false
		}
	}
	s.SkipInboundSources = mergePrefixes(s.SkipInboundSources)
	s.LoopbackAddrs = mergePrefixes(s.LoopbackAddrs)
	s.ExemptUIDs = slices.Clone(s.ExemptUIDs)
	for i, e := range s.ExemptUIDs {
		e.Ports = mergePorts(e.Ports)
		if e.Last < e.First {
			e.Last = e.First
		}
		s.ExemptUIDs[i] = e
	}
	s.InboundPorts = mergePorts(s.InboundPorts)
	s.IgnoreInbound = mergePorts(s.IgnoreInbound)
	s.IncludeOutbound = mergePorts(s.IncludeOutbound)
	s.IgnoreOutbound = mergePorts(s.IgnoreOutbound)
	s.IncludeSubnets = mergePrefixes(s.IncludeSubnets)
	s.SkipSubnets = mergePrefixes(s.SkipSubnets)
	s.SkipOutboundSubnets = mergePrefixes(s.SkipOutboundSubnets)
	ifaces := slices.Clone(s.ExcludeIfaces)
	slices.Sort(ifaces)
	s.ExcludeIfaces = slices.Compact(ifaces)
	return s
}

// normFamilies sorts and dedupes; no family at all means both, so a pod
// whose addresses are unknown never has an unredirected family.
func normFamilies(in []Family) []Family {
	var out []Family
	for _, f := range []Family{IPv4, IPv6} {
		if len(in) == 0 || slices.Contains(in, f) {
			out = append(out, f)
		}
	}
	return out
}

func mergePorts(in []PortRange) []PortRange {
	if in == nil {
		return nil
	}
	rs := slices.Clone(in)
	for i, r := range rs {
		if r.First > r.Last {
			rs[i] = PortRange{r.Last, r.First}
		}
	}
	slices.SortFunc(rs, func(a, b PortRange) int { return int(a.First) - int(b.First) })
	out := make([]PortRange, 0, len(rs))
	for _, r := range rs {
		if n := len(out); n > 0 && uint32(r.First) <= uint32(out[n-1].Last)+1 {
			out[n-1].Last = max(out[n-1].Last, r.Last)
			continue
		}
		out = append(out, r)
	}
	return out
}

// mergePrefixes masks, sorts (IPv4 first) and drops prefixes covered by
// another one.
func mergePrefixes(in []netip.Prefix) []netip.Prefix {
	if in == nil {
		return nil
	}
	ps := make([]netip.Prefix, 0, len(in))
	for _, p := range in {
		if p.IsValid() {
			ps = append(ps, p.Masked())
		}
	}
	slices.SortFunc(ps, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	out := make([]netip.Prefix, 0, len(ps))
	for _, p := range ps {
		if n := len(out); n > 0 && out[n-1].Addr().Is4() == p.Addr().Is4() && out[n-1].Bits() <= p.Bits() && out[n-1].Contains(p.Addr()) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// familyOf says which family a prefix belongs to.
func familyOf(p netip.Prefix) Family {
	if p.Addr().Is4() {
		return IPv4
	}
	return IPv6
}

// ForFamily returns the prefixes of ps in family f.
func ForFamily(ps []netip.Prefix, f Family) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if familyOf(p) == f {
			out = append(out, p)
		}
	}
	return out
}
