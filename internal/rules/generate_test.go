package rules

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func TestMergePorts(t *testing.T) {
	got := mergePorts([]PortRange{{90, 80}, {81, 81}, {100, 100}, {101, 110}, {5, 5}, {5, 5}})
	want := []PortRange{{5, 5}, {80, 90}, {100, 110}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("mergePorts = %v, want %v", got, want)
	}
	if mergePorts(nil) != nil {
		t.Error("nil must stay nil (it means every port)")
	}
	if got := mergePorts([]PortRange{}); got == nil || len(got) != 0 {
		t.Errorf("empty must stay empty, not nil: %#v", got)
	}
	if got := mergePorts([]PortRange{{65535, 65535}, {1, 65535}}); !reflect.DeepEqual(got, []PortRange{{1, 65535}}) {
		t.Errorf("full range: %v", got)
	}
}

func TestMergePrefixes(t *testing.T) {
	got := mergePrefixes(pfx("10.1.2.3/16", "10.0.0.0/8", "fd00::/8", "192.168.1.0/24", "fd00:1::/32", "10.2.0.0/16"))
	want := pfx("10.0.0.0/8", "192.168.1.0/24", "fd00::/8")
	if !reflect.DeepEqual(got, want) {
		t.Errorf("mergePrefixes = %v, want %v", got, want)
	}
}

func TestSplitPorts(t *testing.T) {
	var ps []PortRange
	for p := uint16(1); p <= 14; p++ {
		ps = append(ps, PortRange{p, p})
	}
	ps = append(ps, PortRange{100, 200}) // 14 + 2 > 15
	got := splitPorts(ps)
	if len(got) != 2 || len(got[0]) != 14 || len(got[1]) != 1 {
		t.Errorf("split = %v", got)
	}
	if got := splitPorts(ps[:14]); len(got) != 1 {
		t.Errorf("14 refs must stay one rule: %v", got)
	}
}

// An include list with nothing of a family redirects nothing of that family
// by destination; a skip list with nothing of a family skips nothing.
func TestFamilyOmission(t *testing.T) {
	s := istioSpec(dual)
	s.IncludeSubnets = pfx("10.0.0.0/8")
	s.SkipOutboundSubnets = pfx("10.1.0.0/16")
	rs := Generate(s)
	v6 := IptablesRestore(rs, IPv6)
	if strings.Contains(v6, "outbound-include-subnets") || strings.Contains(v6, "skip-subnets") {
		t.Errorf("IPv6 got IPv4-only address rules:\n%s", v6)
	}
	if strings.Contains(v6, "mesh-cni/outbound-redirect\"") {
		t.Errorf("IPv6 must not redirect every destination when the include list is IPv4-only:\n%s", v6)
	}
	v4 := IptablesRestore(rs, IPv4)
	for _, want := range []string{"-d 10.0.0.0/8 -m comment --comment \"mesh-cni/outbound-include-subnets\" -j REDIRECT", "-d 10.1.0.0/16 -m comment --comment \"mesh-cni/skip-subnets\" -j RETURN"} {
		if !strings.Contains(v4, want) {
			t.Errorf("IPv4 lacks %q:\n%s", want, v4)
		}
	}
	if IptablesRestore(Generate(linkerdSpec([]Family{IPv4})), IPv6) != "" {
		t.Error("an IPv4-only pod gets no ip6tables input")
	}
}

// Every family the pod has is redirected; no family means both.
func TestFamilies(t *testing.T) {
	for _, fams := range [][]Family{nil, {IPv6, IPv4, IPv4}} {
		rs := Generate(Spec{Families: fams, InboundPort: 1, OutboundPort: 2})
		if !reflect.DeepEqual(rs.Families, dual) {
			t.Errorf("families %v -> %v", fams, rs.Families)
		}
		for _, f := range dual {
			if !strings.Contains(IptablesRestore(rs, f), "REDIRECT --to-ports 2") {
				t.Errorf("%v: family %s not redirected", fams, f)
			}
		}
	}
}

// Rule order decides correctness: the proxy and DNS exemptions must come
// before the catch-all redirect, and Istio's excluded ports before DNS
// capture.
func TestOutputOrder(t *testing.T) {
	s := istioSpec(v4)
	s.CaptureDNS = true
	s.IgnoreOutbound = ports("9999")
	order := func(s Spec) []string {
		var out []string
		for _, c := range Generate(s).Tables[0].Chains {
			if c.Name == ChainOutput {
				for _, r := range c.Rules {
					out = append(out, strings.TrimPrefix(r.Comment, commentPrefix)+"/"+string(r.Proto))
				}
			}
		}
		return out
	}
	want := []string{"outbound-ignore-ports/tcp", "outbound-ignore-ports/udp", "inbound-passthrough/", "proxy-to-self/tcp",
		"proxy/", "proxy-gid/", "dns/udp", "dns/tcp", "loopback/", "outbound-redirect/tcp"}
	if got := order(s); !reflect.DeepEqual(got, want) {
		t.Errorf("MESH_OUTPUT order = %v, want %v", got, want)
	}
	// The proxy's path to its own pod: the tunnel and TCP DNS ports go
	// direct (the excluded ones were returned already), every other port
	// to the inbound port.
	self := proxySelfChain(normalize(s)).Rules
	if len(self) != 2 || !reflect.DeepEqual(self[0].DPorts, ports("53", "15008")) || self[1].Verdict != (Verdict{Kind: RedirectTo, Port: 15006}) {
		t.Errorf("MESH_PROXY_SELF = %+v", self)
	}
	// Without IgnoreOutboundFirst: TCP only, after DNS capture, and the
	// proxy's path to its own pod leaves them alone itself.
	s.IgnoreOutboundFirst = false
	want = []string{"inbound-passthrough/", "proxy-to-self/tcp", "proxy/", "proxy-gid/", "dns/udp", "dns/tcp", "loopback/",
		"outbound-ignore-ports/tcp", "outbound-redirect/tcp"}
	if got := order(s); !reflect.DeepEqual(got, want) {
		t.Errorf("MESH_OUTPUT order without IgnoreOutboundFirst = %v, want %v", got, want)
	}
	if self := proxySelfChain(normalize(s)).Rules; len(self) != 2 || !reflect.DeepEqual(self[0].DPorts, ports("53", "9999", "15008")) {
		t.Errorf("MESH_PROXY_SELF without IgnoreOutboundFirst = %+v", self)
	}
}

func TestTProxyPolicyRoute(t *testing.T) {
	s := istioSpec(dual)
	s.Mode = TProxy
	rs := Generate(s)
	if !reflect.DeepEqual(rs.PolicyRoutes, []PolicyRoute{{Mark: TProxyMark, Table: RouteTable}}) {
		t.Errorf("policy routes = %v", rs.PolicyRoutes)
	}
	if len(Generate(istioSpec(v4)).PolicyRoutes) != 0 {
		t.Error("REDIRECT mode needs no policy route")
	}
	nft := Nft(rs)
	for _, want := range []string{"tproxy ip to :15006", "tproxy ip6 to :15006", "type filter hook prerouting priority -150", "type route hook output priority -150"} {
		if !strings.Contains(nft, want) {
			t.Errorf("nft lacks %q", want)
		}
	}
}

func TestNftRulePinsSingleFamily(t *testing.T) {
	r := Rule{Proto: TCP, Verdict: Verdict{Kind: RedirectTo, Port: 1}}
	if got := NftRule(r, v6); !reflect.DeepEqual(got, []string{"meta nfproto ipv6 meta l4proto tcp counter redirect to :1"}) {
		t.Errorf("single family: %q", got)
	}
	if got := NftRule(r, dual); !reflect.DeepEqual(got, []string{"meta l4proto tcp counter redirect to :1"}) {
		t.Errorf("dual: %q", got)
	}
	r.Dst = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	if got := NftRule(r, v6); len(got) != 0 {
		t.Errorf("IPv4 prefix in an IPv6 ruleset: %q", got)
	}
}
