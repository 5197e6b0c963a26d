package validate

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/rules"
)

func TestRuleSet(t *testing.T) {
	good := func() rules.RuleSet {
		return rules.Generate(rules.Spec{Families: []rules.Family{rules.IPv4, rules.IPv6}, ProxyUID: 1337,
			InboundPort: 15006, OutboundPort: 15001, Mode: rules.TProxy})
	}
	if err := RuleSet(good()); err != nil {
		t.Fatalf("generated rule set: %v", err)
	}
	// What stays allowed: one prefix per family in a negated list, several
	// when not negated, and a drop outside nat.
	mixed := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	for _, r := range []rules.Rule{
		{Proto: rules.TCP, Dst: mixed, NotDst: true, Verdict: rules.Verdict{Kind: rules.Return}},
		{Proto: rules.TCP, Src: append(mixed, netip.MustParsePrefix("192.168.0.0/16")), Verdict: rules.Verdict{Kind: rules.Return}},
	} {
		rs := good()
		rs.Tables[0].Chains[0].Rules = append(rs.Tables[0].Chains[0].Rules, r)
		if err := RuleSet(rs); err != nil {
			t.Errorf("%+v: %v", r, err)
		}
	}
	if rs := good(); rs.Tables[1].Name != "mangle" || !slices.ContainsFunc(rs.Tables[1].Chains, hasDrop) {
		t.Errorf("TPROXY rule set has no drop in mangle: %+v", rs.Tables)
	}
	rule := func(r rules.Rule) rules.RuleSet {
		rs := good()
		rs.Tables[0].Chains[0].Rules = append(rs.Tables[0].Chains[0].Rules, r)
		return rs
	}
	redirect := rules.Verdict{Kind: rules.RedirectTo, Port: 1}
	two4 := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.0.0/16")}
	two6 := []netip.Prefix{netip.MustParsePrefix("fd00::/8"), netip.MustParsePrefix("::1/128")}
	for _, tc := range []struct {
		rs   rules.RuleSet
		want string
	}{
		{rules.RuleSet{}, "no address family"},
		{rules.RuleSet{Families: []rules.Family{5}}, "unknown address family"},
		{func() rules.RuleSet { rs := good(); rs.Tables[0].Name = "filter"; return rs }(), "unknown table"},
		{func() rules.RuleSet { rs := good(); rs.Tables[0].Chains[0].Name = "ISTIO_X"; return rs }(), "must start with MESH_"},
		{func() rules.RuleSet { rs := good(); rs.Tables[0].Chains[0].Hook = "INPUT"; return rs }(), "unknown hook"},
		{func() rules.RuleSet { rs := good(); rs.Tables = append(rs.Tables, rs.Tables[0]); return rs }(), "appears in two tables"},
		{func() rules.RuleSet { rs := good(); rs.PolicyRoutes[0].Table = 254; return rs }(), "reserved"},
		{func() rules.RuleSet { rs := good(); rs.PolicyRoutes[0].Mark = 0; return rs }(), "fwmark 0"},
		{rule(rules.Rule{Proto: rules.TCP, Verdict: rules.Verdict{Kind: rules.RedirectTo}}), "port 0"},
		{rule(rules.Rule{Verdict: rules.Verdict{Kind: rules.Jump, Chain: "MESH_NONE"}}), "missing chain"},
		{rule(rules.Rule{Verdict: rules.Verdict{Kind: rules.Jump, Chain: rules.ChainOutput}}), "hooked chain"},
		{rule(rules.Rule{DPorts: []rules.PortRange{{First: 1, Last: 1}}, Verdict: redirect}), "needs protocol"},
		{rule(rules.Rule{Proto: rules.TCP, DPorts: []rules.PortRange{{First: 9, Last: 2}}, Verdict: redirect}), "bad port range"},
		{rule(rules.Rule{InIface: "a-very-long-interface", Verdict: redirect}), "bad interface"},
		{rule(rules.Rule{Dst: []netip.Prefix{{}}, Verdict: redirect}), "invalid address prefix"},
		{rule(rules.Rule{CtState: []string{"SYN"}, Verdict: redirect}), "conntrack state"},
		{rule(rules.Rule{Verdict: rules.Verdict{Kind: "REJECT"}}), "unknown verdict"},
		{rule(rules.Rule{Proto: rules.TCP, Verdict: rules.Verdict{Kind: rules.Drop}}), "DROP in the nat table"},
		{rule(rules.Rule{Proto: rules.TCP, Dst: two4, NotDst: true, Verdict: redirect}), "negated destination list has 2 ipv4 prefixes"},
		{rule(rules.Rule{Src: append(two6, two4[0]), NotSrc: true, Verdict: rules.Verdict{Kind: rules.Return}}), "negated source list has 2 ipv6 prefixes"},
		{rule(rules.Rule{Proto: "sctp", Verdict: redirect}), "unknown protocol"},
		{rule(rules.Rule{Proto: rules.TCP, Verdict: rules.Verdict{Kind: rules.TProxyTo, Port: 1}}), "outside the mangle table"},
	} {
		err := RuleSet(tc.rs)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want an error containing %q", err, tc.want)
		}
	}
}

func hasDrop(c rules.Chain) bool {
	return slices.ContainsFunc(c.Rules, func(r rules.Rule) bool { return r.Verdict.Kind == rules.Drop })
}
