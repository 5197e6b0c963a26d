package rules

import (
	"fmt"
	"net/netip"
	"strings"
)

// NftTable is the one nftables table mesh-cni owns in a pod netns. Family
// inet: one ruleset serves IPv4 and IPv6.
const (
	NftFamily = "inet"
	NftTable  = "mesh_cni"
)

// NftBaseChain says how a hooked chain of table is declared in nft: its
// type, hook and priority (the priorities of iptables' nat and mangle).
func NftBaseChain(table string, hook Hook) (typ, nftHook string, prio int) {
	nftHook = strings.ToLower(string(hook))
	switch {
	case table == "nat":
		return "nat", nftHook, -100
	case hook == Output: // mangle OUTPUT reroutes after a mark change
		return "route", nftHook, -150
	default:
		return "filter", nftHook, -150
	}
}

// Nft renders rs as an "nft -f" script. The script first creates and
// deletes the table, so applying it replaces any previous mesh_cni table in
// one transaction. Chains of every Table share the one table; jump targets
// come first.
func Nft(rs RuleSet) string {
	var b strings.Builder
	fmt.Fprintf(&b, "table %s %s\ndelete table %s %s\ntable %s %s {\n", NftFamily, NftTable, NftFamily, NftTable, NftFamily, NftTable)
	for _, t := range rs.Tables {
		for _, c := range t.Chains {
			fmt.Fprintf(&b, "\tchain %s {\n", c.Name)
			if c.Hook != NoHook {
				typ, hook, prio := NftBaseChain(t.Name, c.Hook)
				fmt.Fprintf(&b, "\t\ttype %s hook %s priority %d; policy accept;\n", typ, hook, prio)
			}
			for _, r := range c.Rules {
				for _, line := range NftRule(r, rs.Families) {
					fmt.Fprintf(&b, "\t\t%s\n", line)
				}
			}
			b.WriteString("\t}\n")
		}
	}
	b.WriteString("}\n")
	return b.String()
}

// NftRule renders one rule as nft statements: one line per family when the
// rule matches addresses, else one line; with a single family, a rule
// without addresses is pinned to it with "meta nfproto".
func NftRule(r Rule, families []Family) []string {
	if r.Src == nil && r.Dst == nil {
		pin := ""
		if len(families) == 1 {
			pin = "meta nfproto " + families[0].String()
		}
		return []string{nftLine(r, 0, nil, nil, pin)}
	}
	var out []string
	for _, f := range families {
		src, dst := ForFamily(r.Src, f), ForFamily(r.Dst, f)
		if (r.Src != nil && len(src) == 0) || (r.Dst != nil && len(dst) == 0) {
			continue
		}
		out = append(out, nftLine(r, f, src, dst, ""))
	}
	return out
}

func nftNot(b bool) string {
	if b {
		return "!= "
	}
	return ""
}

func nftLine(r Rule, fam Family, src, dst []netip.Prefix, pin string) string {
	var a []string
	add := func(s ...string) { a = append(a, s...) }
	// The order is the one nft lists rules in (and the netlink backend
	// builds them in): pin, protocol, interfaces, addresses, ports, owner,
	// marks, conntrack, counter, verdict.
	if pin != "" {
		add(pin)
	}
	proto := string(r.Proto)
	if r.Proto != AnyProto && len(r.DPorts) == 0 && len(r.SPorts) == 0 {
		add("meta l4proto", proto)
	}
	if r.InIface != "" {
		add("iifname", nftNot(r.NotInIface)+fmt.Sprintf("%q", r.InIface))
	}
	if r.OutIface != "" {
		add("oifname", nftNot(r.NotOutIface)+fmt.Sprintf("%q", r.OutIface))
	}
	ipKw := "ip"
	if fam == IPv6 {
		ipKw = "ip6"
	}
	if len(src) > 0 {
		add(ipKw, "saddr", nftNot(r.NotSrc)+nftPrefixes(src))
	}
	if len(dst) > 0 {
		add(ipKw, "daddr", nftNot(r.NotDst)+nftPrefixes(dst))
	}
	if len(r.DPorts) > 0 {
		add(proto, "dport", nftNot(r.NotDPorts)+nftPorts(r.DPorts))
	}
	if len(r.SPorts) > 0 {
		add(proto, "sport", nftPorts(r.SPorts))
	}
	if r.UID != nil {
		add("meta skuid", nftNot(r.NotUID)+uidMatch(r))
	}
	if r.GID != nil {
		add("meta skgid", nftNot(r.NotGID)+fmt.Sprint(*r.GID))
	}
	if r.Mark != nil {
		add("meta mark", nftMarkMatch(*r.Mark, r.NotMark))
	}
	if r.CtMark != nil {
		add("ct mark", nftMarkMatch(*r.CtMark, false))
	}
	if len(r.CtState) > 0 {
		add("ct state", strings.ToLower(strings.Join(r.CtState, ",")))
	}
	add("counter", nftVerdict(r.Verdict, fam)) // counters show which rule a pod's traffic hits
	if r.Comment != "" {
		add("comment", fmt.Sprintf("%q", r.Comment))
	}
	return strings.Join(a, " ")
}

func nftPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		if p.IsSingleIP() {
			s[i] = p.Addr().String()
		} else {
			s[i] = p.String()
		}
	}
	if len(s) == 1 {
		return s[0]
	}
	return "{ " + strings.Join(s, ", ") + " }"
}

func nftPorts(ps []PortRange) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		if p.First == p.Last {
			s[i] = fmt.Sprint(p.First)
		} else {
			s[i] = fmt.Sprintf("%d-%d", p.First, p.Last)
		}
	}
	if len(s) == 1 {
		return s[0]
	}
	return "{ " + strings.Join(s, ", ") + " }"
}

func nftMarkMatch(m Mark, neg bool) string {
	if m.Mask == fullMask {
		return nftNot(neg) + fmt.Sprint(m.Value)
	}
	return fmt.Sprintf("and 0x%x %s0x%x", m.Mask, map[bool]string{true: "!= ", false: "== "}[neg], m.Value)
}

func nftSetMark(m Mark) string {
	if m.Mask == fullMask {
		return fmt.Sprintf("meta mark set %d", m.Value)
	}
	return fmt.Sprintf("meta mark set meta mark and 0x%x or 0x%x", ^m.Mask, m.Value&m.Mask)
}

func nftVerdict(v Verdict, fam Family) string {
	switch v.Kind {
	case Return:
		return "return"
	case Accept:
		return "accept"
	case Drop:
		return "drop"
	case Jump:
		return "jump " + v.Chain
	case RedirectTo:
		return fmt.Sprintf("redirect to :%d", v.Port)
	case TProxyTo:
		kw := "tproxy"
		switch fam {
		case IPv4:
			kw = "tproxy ip"
		case IPv6:
			kw = "tproxy ip6"
		}
		// tproxy is not terminal in nft: mark and accept only once a
		// socket was found, as iptables' TPROXY --tproxy-mark does.
		return fmt.Sprintf("%s to :%d %s accept", kw, v.Port, nftSetMark(v.Mark))
	case SetMark:
		return nftSetMark(v.Mark)
	case ConnmarkSave:
		return "ct mark set meta mark"
	case ConnmarkRestore:
		return "meta mark set ct mark"
	}
	return "# unknown verdict " + string(v.Kind)
}
