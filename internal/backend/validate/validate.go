// Package validate rejects a RuleSet that no backend can program, before a
// backend touches the pod netns, so a bad rule set fails with a clear error.
package validate

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// ChainPrefix starts every chain name mesh-cni owns.
const ChainPrefix = "MESH_"

// Tables are the netfilter tables a RuleSet may use.
var Tables = []string{"raw", "mangle", "nat"}

var ctStates = map[string]bool{"NEW": true, "ESTABLISHED": true, "RELATED": true, "INVALID": true, "UNTRACKED": true}

// RuleSet returns an error naming the first thing in rs that cannot be
// programmed: unknown table or hook, a chain outside our prefix, a jump to a
// missing chain, a redirect to port 0, a drop in the nat table, a negated
// address list with several prefixes of one family, a bad interface name,
// port range or policy route.
func RuleSet(rs rules.RuleSet) error {
	if len(rs.Families) == 0 {
		return fmt.Errorf("rule set has no address family")
	}
	for _, f := range rs.Families {
		if f != rules.IPv4 && f != rules.IPv6 {
			return fmt.Errorf("unknown address family %d", f)
		}
	}
	seen := map[string]bool{}
	chains := map[string]bool{}
	for _, t := range rs.Tables {
		for _, c := range t.Chains {
			if chains[c.Name] {
				return fmt.Errorf("chain %s appears in two tables", c.Name)
			}
			chains[c.Name] = true
		}
		if !known(t.Name) {
			return fmt.Errorf("unknown table %q", t.Name)
		}
		if seen[t.Name] {
			return fmt.Errorf("table %q appears twice", t.Name)
		}
		seen[t.Name] = true
		if err := table(t); err != nil {
			return fmt.Errorf("table %s: %w", t.Name, err)
		}
	}
	for _, p := range rs.PolicyRoutes {
		if p.Mark == 0 {
			return fmt.Errorf("policy route: fwmark 0")
		}
		if p.Table <= 0 || p.Table >= 253 && p.Table <= 255 {
			return fmt.Errorf("policy route: table %d is reserved or invalid", p.Table)
		}
	}
	return nil
}

// negatedList rejects a negated address list with more than one prefix of
// a family: iptables cannot say "! -d a,b" in one rule, and one rule per
// prefix would match everything (each negation lets the other prefix in).
func negatedList(what string, ps []netip.Prefix, negated bool) error {
	if !negated {
		return nil
	}
	for _, f := range []rules.Family{rules.IPv4, rules.IPv6} {
		if fps := rules.ForFamily(ps, f); len(fps) > 1 {
			return fmt.Errorf("negated %s list has %d %s prefixes %v: iptables holds at most one per family in a negated match", what, len(fps), f, fps)
		}
	}
	return nil
}

func known(name string) bool {
	for _, t := range Tables {
		if t == name {
			return true
		}
	}
	return false
}

func table(t rules.Table) error {
	chains := map[string]rules.Hook{}
	for _, c := range t.Chains {
		if !strings.HasPrefix(c.Name, ChainPrefix) || len(c.Name) > 28 || strings.ContainsAny(c.Name, " \t\n\"'") {
			return fmt.Errorf("chain name %q: must start with %s, at most 28 characters, no spaces or quotes", c.Name, ChainPrefix)
		}
		if _, dup := chains[c.Name]; dup {
			return fmt.Errorf("chain %s appears twice", c.Name)
		}
		switch c.Hook {
		case rules.NoHook, rules.PreRouting, rules.Output:
		default:
			return fmt.Errorf("chain %s: unknown hook %q", c.Name, c.Hook)
		}
		chains[c.Name] = c.Hook
	}
	for _, c := range t.Chains {
		for i, r := range c.Rules {
			if err := rule(t.Name, chains, r); err != nil {
				return fmt.Errorf("chain %s rule %d: %w", c.Name, i+1, err)
			}
		}
	}
	return nil
}

func rule(table string, chains map[string]rules.Hook, r rules.Rule) error {
	switch r.Proto {
	case rules.AnyProto, rules.TCP, rules.UDP:
	default:
		return fmt.Errorf("unknown protocol %q", r.Proto)
	}
	if (len(r.DPorts) > 0 || len(r.SPorts) > 0) && r.Proto == rules.AnyProto {
		return fmt.Errorf("a port match needs protocol tcp or udp")
	}
	for _, p := range append(append([]rules.PortRange{}, r.DPorts...), r.SPorts...) {
		if p.First == 0 || p.Last < p.First {
			return fmt.Errorf("bad port range %d-%d", p.First, p.Last)
		}
	}
	for _, name := range []string{r.InIface, r.OutIface} {
		if len(name) > 15 || strings.ContainsAny(name, " \t\n\"'/") {
			return fmt.Errorf("bad interface name %q", name)
		}
	}
	for _, p := range append(append([]netip.Prefix{}, r.Src...), r.Dst...) {
		if !p.IsValid() || p.Addr().Zone() != "" {
			return fmt.Errorf("invalid address prefix %s", p)
		}
	}
	if err := negatedList("source", r.Src, r.NotSrc); err != nil {
		return err
	}
	if err := negatedList("destination", r.Dst, r.NotDst); err != nil {
		return err
	}
	if r.UIDTo != 0 && (r.UID == nil || r.UIDTo <= *r.UID || r.NotUID) {
		return fmt.Errorf("a UID range needs a first UID below its last, not negated")
	}
	for _, s := range r.CtState {
		if !ctStates[s] {
			return fmt.Errorf("unknown conntrack state %q", s)
		}
	}
	v := r.Verdict
	switch v.Kind {
	case rules.Return, rules.Accept, rules.ConnmarkRestore:
	case rules.ConnmarkSave:
	case rules.Drop:
		if table == "nat" {
			return fmt.Errorf("DROP in the nat table (iptables refuses it there)")
		}
	case rules.Jump:
		hook, ok := chains[v.Chain]
		if !ok {
			return fmt.Errorf("jump to missing chain %q", v.Chain)
		}
		if hook != rules.NoHook {
			return fmt.Errorf("jump to hooked chain %q", v.Chain)
		}
	case rules.RedirectTo:
		if table != "nat" {
			return fmt.Errorf("REDIRECT outside the nat table")
		}
		if v.Port == 0 {
			return fmt.Errorf("REDIRECT to port 0")
		}
	case rules.TProxyTo:
		if table != "mangle" {
			return fmt.Errorf("TPROXY outside the mangle table")
		}
		if v.Port == 0 {
			return fmt.Errorf("TPROXY to port 0")
		}
		if r.Proto == rules.AnyProto {
			return fmt.Errorf("TPROXY needs protocol tcp or udp")
		}
	case rules.SetMark:
		if v.Mark.Mask == 0 {
			return fmt.Errorf("MARK with mask 0")
		}
	default:
		return fmt.Errorf("unknown verdict %q", v.Kind)
	}
	return nil
}
