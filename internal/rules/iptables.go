package rules

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// maxMultiport is how many port references one multiport match holds; a
// range counts two.
const maxMultiport = 15

// IptablesRestore renders rs for one family as "iptables-restore --noflush"
// (or ip6tables-restore) input: per table, our chains are declared (which
// creates or flushes them), filled, and jumped to from the built-in chains.
// It is empty when rs does not cover fam.
func IptablesRestore(rs RuleSet, fam Family) string {
	if !slices.Contains(rs.Families, fam) {
		return ""
	}
	var b strings.Builder
	for _, t := range rs.Tables {
		fmt.Fprintf(&b, "*%s\n", t.Name)
		for _, c := range t.Chains {
			fmt.Fprintf(&b, ":%s - [0:0]\n", c.Name)
		}
		for _, c := range t.Chains {
			for _, r := range c.Rules {
				for _, line := range iptablesRule(r, fam) {
					fmt.Fprintf(&b, "-A %s %s\n", c.Name, line)
				}
			}
		}
		for _, c := range t.Chains {
			if c.Hook != NoHook {
				fmt.Fprintf(&b, "-A %s -j %s -m comment --comment %q\n", c.Hook, c.Name, cm("jump"))
			}
		}
		b.WriteString("COMMIT\n")
	}
	return b.String()
}

// iptablesRule returns r's rule lines for fam (without "-A CHAIN"): none
// when an address list of r has no prefix of fam, several when r lists
// several prefixes or more ports than one multiport match holds.
func iptablesRule(r Rule, fam Family) []string {
	src, dst, ok := familyAddrs(r, fam)
	if !ok {
		return nil
	}
	srcs, dsts := addrArgs(src, r.NotSrc), addrArgs(dst, r.NotDst)
	var out []string
	for _, s := range srcs {
		for _, d := range dsts {
			for _, ports := range splitPorts(r.DPorts) {
				out = append(out, iptablesLine(r, s, d, ports))
			}
		}
	}
	return out
}

// familyAddrs filters r's address lists to fam; ok is false when a list is
// set but has nothing of fam. A negated list stays one argument (see
// iptablesRule): iptables refuses "!" with several addresses, which is
// louder than dropping some.
func familyAddrs(r Rule, fam Family) (src, dst []netip.Prefix, ok bool) {
	src, dst = ForFamily(r.Src, fam), ForFamily(r.Dst, fam)
	if (r.Src != nil && len(src) == 0) || (r.Dst != nil && len(dst) == 0) {
		return nil, nil, false
	}
	return src, dst, true
}

// addrArgs is one "-s"/"-d" argument per prefix (a rule line each), or
// "" for no address match; a negated list is one argument.
func addrArgs(ps []netip.Prefix, negated bool) []string {
	if len(ps) == 0 {
		return []string{""}
	}
	strs := make([]string, len(ps))
	for i, p := range ps {
		strs[i] = p.String()
	}
	if negated {
		return []string{strings.Join(strs, ",")}
	}
	return strs
}

// splitPorts cuts a port list into multiport-sized pieces.
func splitPorts(ps []PortRange) [][]PortRange {
	if len(ps) == 0 {
		return [][]PortRange{nil}
	}
	var out [][]PortRange
	var cur []PortRange
	refs := 0
	for _, p := range ps {
		n := 1
		if p.First != p.Last {
			n = 2
		}
		if refs+n > maxMultiport {
			out = append(out, cur)
			cur, refs = nil, 0
		}
		cur = append(cur, p)
		refs += n
	}
	return append(out, cur)
}

func not(b bool) string {
	if b {
		return "! "
	}
	return ""
}

func iptablesLine(r Rule, src, dst string, ports []PortRange) string {
	var a []string
	add := func(s ...string) { a = append(a, s...) }
	if r.Proto != AnyProto {
		add("-p", string(r.Proto))
	}
	if r.InIface != "" {
		add(not(r.NotInIface)+"-i", r.InIface)
	}
	if r.OutIface != "" {
		add(not(r.NotOutIface)+"-o", r.OutIface)
	}
	if src != "" {
		add(not(r.NotSrc)+"-s", src)
	}
	if dst != "" {
		add(not(r.NotDst)+"-d", dst)
	}
	if len(ports) == 1 {
		add(not(r.NotDPorts)+"--dport", iptPort(ports[0]))
	} else if len(ports) > 1 {
		add("-m", "multiport", not(r.NotDPorts)+"--dports", iptPorts(ports))
	}
	if len(r.SPorts) == 1 {
		add("--sport", iptPort(r.SPorts[0]))
	} else if len(r.SPorts) > 1 {
		add("-m", "multiport", "--sports", iptPorts(r.SPorts))
	}
	if r.UID != nil || r.GID != nil {
		add("-m", "owner")
		if r.UID != nil {
			add(not(r.NotUID)+"--uid-owner", uidMatch(r))
		}
		if r.GID != nil {
			add(not(r.NotGID)+"--gid-owner", fmt.Sprint(*r.GID))
		}
	}
	if r.Mark != nil {
		add("-m", "mark", not(r.NotMark)+"--mark", iptMark(*r.Mark))
	}
	if r.CtMark != nil {
		add("-m", "connmark", "--mark", iptMark(*r.CtMark))
	}
	if len(r.CtState) > 0 {
		add("-m", "conntrack", "--ctstate", strings.Join(r.CtState, ","))
	}
	if r.Comment != "" {
		add("-m", "comment", "--comment", fmt.Sprintf("%q", r.Comment))
	}
	add(iptVerdict(r.Verdict)...)
	return strings.Join(a, " ")
}

func iptPort(p PortRange) string {
	if p.First == p.Last {
		return fmt.Sprint(p.First)
	}
	return fmt.Sprintf("%d:%d", p.First, p.Last)
}

func iptPorts(ps []PortRange) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = iptPort(p)
	}
	return strings.Join(s, ",")
}

func iptMark(m Mark) string {
	if m.Mask == fullMask {
		return fmt.Sprint(m.Value)
	}
	return fmt.Sprintf("%d/0x%x", m.Value, m.Mask)
}

func iptVerdict(v Verdict) []string {
	switch v.Kind {
	case Jump:
		return []string{"-j", v.Chain}
	case RedirectTo:
		return []string{"-j", "REDIRECT", "--to-ports", fmt.Sprint(v.Port)}
	case TProxyTo:
		return []string{"-j", "TPROXY", "--on-port", fmt.Sprint(v.Port), "--tproxy-mark", fmt.Sprintf("%d/0x%x", v.Mark.Value, v.Mark.Mask)}
	case SetMark:
		return []string{"-j", "MARK", "--set-xmark", fmt.Sprintf("%d/0x%x", v.Mark.Value, v.Mark.Mask)}
	case ConnmarkSave:
		return []string{"-j", "CONNMARK", "--save-mark"}
	case ConnmarkRestore:
		return []string{"-j", "CONNMARK", "--restore-mark"}
	default: // Return, Accept, Drop
		return []string{"-j", string(v.Kind)}
	}
}

// uidMatch is the owner match's UID or "first-last" range (the same
// syntax in iptables and nft).
func uidMatch(r Rule) string {
	if r.UIDTo > *r.UID {
		return fmt.Sprintf("%d-%d", *r.UID, r.UIDTo)
	}
	return fmt.Sprint(*r.UID)
}
