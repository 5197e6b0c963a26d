package backend_test

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/backend"
	"github.com/mesh-cni/mesh-cni/internal/rules"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// richSpec is testSpec with every option that adds a kind of rule: proxy
// GID, UID exemptions (a range with ports, a single UID), skipped sources,
// an excluded interface, the proxy-to-self path, inbound and outbound
// include lists, DNS to one resolver.
func richSpec(mode rules.Mode) rules.Spec {
	s := testSpec(mode)
	gid := uint32(proxyUID + 1)
	s.ProxyGID = &gid
	s.ExemptUIDs = []rules.UIDExemption{
		{First: 5000, Last: 5009, Ports: []rules.PortRange{{First: 8443, Last: 8443}}},
		{First: 6000, Last: 6000, Proto: rules.TCP},
	}
	s.SkipInboundSources = []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("fd00:51::/64"),
		netip.MustParsePrefix("192.0.2.64/26"), netip.MustParsePrefix("fd00:52::/48")}
	s.SkipSubnets = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
	s.ExcludeIfaces = []string{"eth9"}
	s.LoopbackToInbound = true
	s.InboundPorts = []rules.PortRange{{First: 8000, Last: 8100}}
	s.IncludeSubnets = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00:1::/64")}
	s.IncludeOutbound = []rules.PortRange{{First: 443, Last: 443}}
	s.DNSDest = []netip.Prefix{netip.MustParsePrefix("10.96.0.10/32")}
	// Three of each, so an element can be removed and a set is left.
	s.IgnoreOutbound = append(s.IgnoreOutbound, rules.PortRange{First: 9200, Last: 9200})
	s.SkipOutboundSubnets = append(s.SkipOutboundSubnets, netip.MustParsePrefix("100.64.0.0/10"), netip.MustParsePrefix("fd00:22::/64"),
		netip.MustParsePrefix("192.0.2.0/24"))
	return s
}

// mutant is rs with one rule changed in place: same chains, same number
// of rules, one port, address, identity, mark or verdict different.
type mutant struct {
	what string // chain, rule number, change
	kind string // the kind of rule or field changed
	name string // the set element Check must name, if a set was changed
	rs   rules.RuleSet
}

func mutants(rs rules.RuleSet) []mutant {
	var out []mutant
	for ti, tb := range rs.Tables {
		for ci, ch := range tb.Chains {
			for ri, r := range ch.Rules {
				for _, m := range ruleMutants(r) {
					c := cloneRuleSet(rs)
					c.Tables[ti].Chains[ci].Rules[ri] = m.r
					out = append(out, mutant{what: fmt.Sprintf("%s %s rule %d (%s): %s", tb.Name, ch.Name, ri+1, r.Comment, m.what), kind: m.kind, name: m.name, rs: c})
				}
			}
		}
	}
	return out
}

func cloneRuleSet(rs rules.RuleSet) rules.RuleSet {
	c := rs
	c.Tables = slices.Clone(rs.Tables)
	for i := range c.Tables {
		c.Tables[i].Chains = slices.Clone(c.Tables[i].Chains)
		for j := range c.Tables[i].Chains {
			c.Tables[i].Chains[j].Rules = slices.Clone(c.Tables[i].Chains[j].Rules)
		}
	}
	return c
}

type changed struct {
	what, kind, name string
	r                rules.Rule
}

// ruleMutants changes one thing of r at a time, keeping the rule valid
// and in the same families (so the rule count per chain stays the same).
func ruleMutants(r rules.Rule) []changed {
	var out []changed
	add := func(kind, what string, f func(*rules.Rule)) {
		m := r
		f(&m)
		out = append(out, changed{what: what, kind: kind, r: m})
	}
	v := r.Verdict
	switch v.Kind {
	case rules.RedirectTo, rules.TProxyTo:
		add("verdict "+string(v.Kind), fmt.Sprintf("port %d→%d", v.Port, v.Port+1), func(m *rules.Rule) { m.Verdict.Port++ })
	}
	switch v.Kind {
	case rules.TProxyTo, rules.SetMark:
		add("verdict "+string(v.Kind), "mark", func(m *rules.Rule) { m.Verdict.Mark.Value ^= 0x100 })
	}
	switch v.Kind {
	case rules.Return, rules.Drop, rules.Jump, rules.RedirectTo, rules.ConnmarkSave, rules.ConnmarkRestore, rules.SetMark:
		add("verdict "+string(v.Kind), string(v.Kind)+"→ACCEPT", func(m *rules.Rule) { m.Verdict = rules.Verdict{Kind: rules.Accept} })
	case rules.Accept, rules.TProxyTo:
		add("verdict "+string(v.Kind), string(v.Kind)+"→RETURN", func(m *rules.Rule) { m.Verdict = rules.Verdict{Kind: rules.Return} })
	}
	if v.Kind == rules.ConnmarkSave {
		add("verdict "+string(v.Kind), "save→restore", func(m *rules.Rule) { m.Verdict.Kind = rules.ConnmarkRestore })
	}
	if r.Proto != rules.AnyProto {
		add("proto", "tcp↔udp", func(m *rules.Rule) {
			m.Proto = map[rules.Proto]rules.Proto{rules.TCP: rules.UDP, rules.UDP: rules.TCP}[r.Proto]
		})
	}
	out = append(out, setMutants(r)...)
	if len(r.DPorts) == 1 {
		add("dport", "port +1", func(m *rules.Rule) { m.DPorts = shiftPorts(r.DPorts) })
	}
	if len(r.DPorts) > 0 {
		add("dport", "negated", func(m *rules.Rule) { m.NotDPorts = !r.NotDPorts })
	}
	if len(r.SPorts) == 1 {
		add("sport", "port +1", func(m *rules.Rule) { m.SPorts = shiftPorts(r.SPorts) })
	}
	if i := lonePrefix(r.Dst); i >= 0 {
		add("daddr", "prefix moved", func(m *rules.Rule) { m.Dst = movePrefix(r.Dst, i) })
	}
	if len(r.Dst) > 0 && len(r.Dst) <= 2 && lonePrefix(r.Dst) >= 0 {
		add("daddr", "negation flipped", func(m *rules.Rule) { m.NotDst = !r.NotDst })
	}
	if i := lonePrefix(r.Src); i >= 0 {
		add("saddr", "prefix moved", func(m *rules.Rule) { m.Src = movePrefix(r.Src, i) })
	}
	if r.UID != nil {
		add("uid", "uid +1", func(m *rules.Rule) {
			u := *r.UID + 1
			m.UID = &u
			if r.UIDTo != 0 {
				m.UIDTo = r.UIDTo + 1
			}
		})
		if r.UIDTo != 0 {
			add("uid range", "range end -1", func(m *rules.Rule) { m.UIDTo = r.UIDTo - 1 })
		}
	}
	if r.GID != nil {
		add("gid", "gid +1", func(m *rules.Rule) { g := *r.GID + 1; m.GID = &g })
	}
	if r.Mark != nil {
		add("mark", "value", func(m *rules.Rule) { k := *r.Mark; k.Value ^= 0x100; m.Mark = &k })
		add("mark", "negation flipped", func(m *rules.Rule) { m.NotMark = !r.NotMark })
	}
	if r.CtMark != nil {
		add("ct mark", "value", func(m *rules.Rule) { k := *r.CtMark; k.Value ^= 0x100; m.CtMark = &k })
	}
	if len(r.CtState) > 0 {
		add("ct state", "ESTABLISHED only", func(m *rules.Rule) { m.CtState = []string{"ESTABLISHED"} })
	}
	if r.InIface != "" {
		add("iifname", "other name", func(m *rules.Rule) { m.InIface = r.InIface + "x" })
	}
	if r.OutIface != "" {
		add("oifname", "other name", func(m *rules.Rule) { m.OutIface = r.OutIface + "x" })
	}
	return out
}

func shiftPorts(ps []rules.PortRange) []rules.PortRange {
	out := slices.Clone(ps)
	out[0].First++
	out[0].Last++
	return out
}

// lonePrefix is the index of a prefix that is the only one of its family
// in ps (so it is matched by itself, not in a set); -1 if none.
func lonePrefix(ps []netip.Prefix) int {
	for i, p := range ps {
		n := 0
		for _, q := range ps {
			if q.Addr().Is4() == p.Addr().Is4() {
				n++
			}
		}
		if n == 1 && p.Bits() > 0 {
			return i
		}
	}
	return -1
}

// movePrefix flips the last bit of prefix i: same family, same length,
// another network.
func movePrefix(ps []netip.Prefix, i int) []netip.Prefix {
	out := slices.Clone(ps)
	p := out[i]
	b := p.Addr().AsSlice()
	bit := p.Bits() - 1
	b[bit/8] ^= 0x80 >> (bit % 8)
	a, _ := netip.AddrFromSlice(b)
	out[i] = netip.PrefixFrom(a, p.Bits())
	return out
}

// TestNftCheckRuleReplacedInPlace: for every rule of rich REDIRECT and
// TPROXY rule sets, and every kind of change one rule can carry (port,
// address, identity, mark, state, interface, verdict), the netns holds the
// changed rule set (same chains, same rule count) and Check against the
// intended one must fail naming the rule. A Check that counted rules only
// would pass all of them.
func TestNftCheckRuleReplacedInPlace(t *testing.T) {
	b := mustNew(t, backend.NFTables)
	n := testenv.NewNS(t)
	kinds := map[string]int{}
	for _, mode := range []rules.Mode{rules.Redirect, rules.TProxy} {
		want := rules.Generate(richSpec(mode))
		ms := mutants(want)
		for _, m := range ms {
			if err := b.Apply(n.Path(), m.rs); err != nil {
				t.Errorf("%s: Apply of the changed set: %v", m.what, err)
				continue
			}
			if err := b.Check(n.Path(), m.rs); err != nil {
				t.Errorf("%s: Check of the changed set against itself: %v", m.what, err)
				continue
			}
			err := b.Check(n.Path(), want)
			switch {
			case err == nil:
				t.Errorf("%s %s: Check passed a rule replaced in place", mode, m.what)
			case strings.Contains(err.Error(), "rules, want"):
				t.Errorf("%s %s: the change altered the rule count, not a replacement in place: %v", mode, m.what, err)
			case !strings.Contains(err.Error(), "differs"):
				t.Errorf("%s %s: %v, want an error naming the rule that differs", mode, m.what, err)
			case m.name != "" && !strings.Contains(err.Error(), m.name):
				t.Errorf("%s %s: %v, want an error naming the set element %s", mode, m.what, err, m.name)
			default:
				kinds[m.kind]++
			}
		}
	}
	// Every kind of rule the generator writes, every verdict, and every
	// kind of set element was changed at least once.
	for _, k := range []string{
		"verdict RETURN", "verdict ACCEPT", "verdict DROP", "verdict JUMP", "verdict REDIRECT", "verdict TPROXY",
		"verdict MARK", "verdict CONNMARK_SAVE", "verdict CONNMARK_RESTORE",
		"proto", "dport", "daddr", "saddr", "uid", "uid range", "gid", "mark", "ct mark", "ct state", "iifname", "oifname",
		"dport set: port changed", "dport set: range changed", "dport set: port added", "dport set: port removed",
		"daddr set: v4 prefix moved", "daddr set: v4 prefix added", "daddr set: v4 prefix removed",
		"daddr set: v6 prefix moved", "daddr set: v6 prefix added", "daddr set: v6 prefix removed",
		"saddr set: v4 prefix moved", "saddr set: v4 prefix added", "saddr set: v6 prefix moved", "saddr set: v6 prefix added",
	} {
		if kinds[k] == 0 {
			t.Errorf("no detected change of kind %q", k)
		}
	}
	t.Logf("changes detected per kind: %v", kinds)
}

// TestNftCheckRuleReplacedByNft: the same, with the rule rewritten behind
// the backend's back by "nft replace rule" (its handle kept): a port, a
// verdict, and one element of each kind of anonymous set (the kernel
// refuses "nft add/delete element" on an anonymous set, so the rule is
// replaced, in one nft transaction, by one carrying another set). Check must name the element. A
// rule replaced by itself, its set now encoded by nft (descending, with an
// end element at zero), must pass.
func TestNftCheckRuleReplacedByNft(t *testing.T) {
	b := mustNew(t, backend.NFTables)
	plain, rich := rules.Generate(testSpec(rules.Redirect)), rules.Generate(richSpec(rules.Redirect))
	const ports, v4, v6 = "{ 9090, 9095-9099, 9200 }", "{ 100.64.0.0/10, 192.0.2.0/24, 198.19.1.0/24, 203.0.113.0/24 }", "{ 2001:db8::/32, fd00:20::/64, fd00:22::/64 }"
	const src4, src6 = "{ 192.0.2.64/26, 198.51.100.0/24 }", "{ fd00:51::/64, fd00:52::/48 }"
	for _, tc := range []struct {
		name, from, to string
		rs             rules.RuleSet
		chain          string
		element        string // the element Check must name; "" any difference, "same" none
	}{
		{"port", fmt.Sprintf("redirect to :%d", outboundPort), fmt.Sprintf("redirect to :%d", outboundPort+1), plain, rules.ChainOutput, ""},
		{"verdict", "redirect to :15053", "accept", plain, rules.ChainOutput, ""},
		{"return", `return comment "mesh-cni/loopback"`, `accept comment "mesh-cni/loopback"`, plain, rules.ChainOutput, ""},
		{"set port changed", ports, "{ 9091, 9095-9099, 9200 }", rich, rules.ChainOutput, "9090"},
		{"set range changed", ports, "{ 9090, 9095-9098, 9200 }", rich, rules.ChainOutput, "9095-9099"},
		{"set port added", ports, "{ 9090, 9095-9099, 9200, 9300 }", rich, rules.ChainOutput, "9300"},
		{"set port removed", ports, "{ 9090, 9095-9099 }", rich, rules.ChainOutput, "9200"},
		{"set v4 prefix changed", v4, "{ 100.64.0.0/10, 192.0.2.0/25, 198.19.1.0/24, 203.0.113.0/24 }", rich, rules.ChainOutput, "192.0.2.0/24"},
		{"set v4 prefix added", v4, "{ 100.64.0.0/10, 192.0.2.0/24, 198.19.1.0/24, 203.0.113.0/24, 233.252.0.0/24 }", rich, rules.ChainOutput, "233.252.0.0/24"},
		{"set v4 prefix removed", v4, "{ 100.64.0.0/10, 192.0.2.0/24, 198.19.1.0/24 }", rich, rules.ChainOutput, "203.0.113.0/24"},
		{"set v6 prefix changed", v6, "{ 2001:db8::/33, fd00:20::/64, fd00:22::/64 }", rich, rules.ChainOutput, "2001:db8::/32"},
		{"set v6 prefix added", v6, "{ 2001:db8::/32, 3fff:100::/32, fd00:20::/64, fd00:22::/64 }", rich, rules.ChainOutput, "3fff:100::/32"},
		{"set v6 prefix removed", v6, "{ 2001:db8::/32, fd00:20::/64 }", rich, rules.ChainOutput, "fd00:22::/64"},
		{"source set v4 prefix moved", src4, "{ 192.0.2.128/26, 198.51.100.0/24 }", rich, rules.ChainInbound, "192.0.2.64/26"},
		{"source set v6 prefix added", src6, "{ fd00:51::/64, fd00:52::/48, fd00:53::/48 }", rich, rules.ChainInbound, "fd00:53::/48"},
		{"same port set", ports, ports, rich, rules.ChainOutput, "same"},
		{"same v4 set", v4, v4, rich, rules.ChainOutput, "same"},
		{"same v6 set", v6, v6, rich, rules.ChainOutput, "same"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := testenv.NewNS(t)
			if err := b.Apply(n.Path(), tc.rs); err != nil {
				t.Fatal(err)
			}
			out, err := run(n, "nft", "-a", "list", "chain", "inet", rules.NftTable, tc.chain)
			if err != nil {
				t.Fatalf("nft list: %v\n%s", err, out)
			}
			var handle, rule string
			for _, line := range strings.Split(out, "\n") {
				body, h, ok := strings.Cut(strings.TrimSpace(line), " # handle ")
				if ok && strings.Contains(body, tc.from) {
					handle, rule = h, strings.Replace(body, tc.from, tc.to, 1)
					break
				}
			}
			if handle == "" {
				t.Fatalf("no rule with %q in\n%s", tc.from, out)
			}
			chain := "inet " + rules.NftTable + " " + tc.chain
			cmd := "replace rule " + chain + " handle " + handle + " " + rule
			if strings.HasPrefix(tc.from, "{") {
				// nft (1.0.6) aborts on "replace rule" with an anonymous
				// interval set: insert before, delete, in one transaction.
				cmd = "insert rule " + chain + " position " + handle + " " + rule + "; delete rule " + chain + " handle " + handle
			}
			if out, err := run(n, "nft", cmd); err != nil {
				t.Fatalf("nft %s: %v\n%s", cmd, err, out)
			}
			err = b.Check(n.Path(), tc.rs)
			switch {
			case tc.element == "same":
				if err != nil {
					t.Errorf("Check after nft rewrote the rule unchanged: %v", err)
				}
			case err == nil || !strings.Contains(err.Error(), "differs"):
				t.Errorf("Check after replacing %q with %q: %v, want an error naming the rule that differs", tc.from, tc.to, err)
			case !strings.Contains(err.Error(), tc.element):
				t.Errorf("Check after replacing %q with %q: %v, want an error naming %s", tc.from, tc.to, err, tc.element)
			}
		})
	}
}
