package rules

import (
	"net/netip"
	"slices"
)

// Fixed values of the TPROXY contract, the ones Envoy uses.
const (
	TProxyMark = 1337 // marks intercepted connections (and the proxy's upstream sockets)
	LoopMark   = 1338 // marks the proxy's own traffic to a local address (TPROXY + LoopbackToInbound)
	RouteTable = 133  // "local default dev lo" table for TProxyMark
	DNSPort    = 53
)

// Chain names.
const (
	ChainInbound              = "MESH_INBOUND"
	ChainInRedirect           = "MESH_IN_REDIRECT"
	ChainOutput               = "MESH_OUTPUT"
	ChainTProxyInbound        = "MESH_TPROXY_INBOUND"
	ChainTProxyOutput         = "MESH_TPROXY_OUTPUT"
	ChainTProxy               = "MESH_TPROXY"
	ChainDivert               = "MESH_DIVERT"
	ChainProxySelf            = "MESH_PROXY_SELF"
	ChainDropInvalid          = "MESH_DROP_INVALID"
	commentPrefix             = "mesh-cni/"
	fullMask           uint32 = 0xffffffff
)

var (
	// Loopback, per family: never TPROXY or self-redirect these.
	loopbackHosts = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("::1/128")}
	// Envoy's inbound passthrough source addresses.
	passthroughSources = []netip.Prefix{netip.MustParsePrefix("127.0.0.6/32"), netip.MustParsePrefix("::6/128")}
)

// Generate builds the RuleSet for spec. It is pure and deterministic: the
// same Spec always gives the same RuleSet.
func Generate(spec Spec) RuleSet {
	s := normalize(spec)
	rs := RuleSet{Families: s.Families}
	nat := Table{Name: "nat"}
	var mangle *Table
	if s.Mode == TProxy {
		mangle = &Table{Name: "mangle", Chains: tproxyChains(s)}
		rs.PolicyRoutes = []PolicyRoute{{Mark: TProxyMark, Table: RouteTable}}
	} else {
		nat.Chains = append(nat.Chains, inRedirectChain(s), inboundChain(s))
	}
	if s.LoopbackToInbound {
		nat.Chains = append(nat.Chains, proxySelfChain(s))
	}
	nat.Chains = append(nat.Chains, outputChain(s))
	rs.Tables = append(rs.Tables, nat)
	if s.DropInvalid {
		if mangle == nil {
			mangle = &Table{Name: "mangle"}
		}
		mangle.Chains = append(mangle.Chains, Chain{Name: ChainDropInvalid, Hook: PreRouting, Rules: []Rule{
			{CtState: []string{"INVALID"}, Verdict: Verdict{Kind: Drop}, Comment: cm("drop-invalid")}}})
	}
	if mangle != nil {
		rs.Tables = append(rs.Tables, *mangle)
	}
	for _, a := range s.LoopbackAddrs {
		if slices.Contains(s.Families, familyOf(a)) {
			rs.LoopbackAddrs = append(rs.LoopbackAddrs, a)
		}
	}
	return rs
}

// inboundIgnore is every port inbound redirection must leave alone.
func inboundIgnore(s Spec) []PortRange {
	ports := slices.Clone(s.IgnoreInbound)
	if s.TunnelPort != 0 {
		ports = append(ports, PortRange{s.TunnelPort, s.TunnelPort})
	}
	return mergePorts(ports)
}

func inRedirectChain(s Spec) Chain {
	c := Chain{Name: ChainInRedirect}
	if ign := inboundIgnore(s); len(ign) > 0 {
		c.Rules = append(c.Rules, Rule{Proto: TCP, DPorts: ign, Verdict: Verdict{Kind: Return}, Comment: cm("inbound-ignore-ports")})
	}
	redirect := Verdict{Kind: RedirectTo, Port: s.InboundPort}
	switch {
	case s.InboundPorts == nil:
		c.Rules = append(c.Rules, Rule{Proto: TCP, Verdict: redirect, Comment: cm("inbound-redirect")})
	case len(s.InboundPorts) > 0:
		c.Rules = append(c.Rules, Rule{Proto: TCP, DPorts: s.InboundPorts, Verdict: redirect, Comment: cm("inbound-redirect-ports")})
	}
	return c
}

func inboundChain(s Spec) Chain {
	c := Chain{Name: ChainInbound, Hook: PreRouting}
	c.Rules = append(c.Rules, excludeIfaceRules(s, true)...)
	c.Rules = append(c.Rules, skipSourceRules(s)...)
	c.Rules = append(c.Rules, Rule{Proto: TCP, Verdict: Verdict{Kind: Jump, Chain: ChainInRedirect}, Comment: cm("inbound")})
	return c
}

// skipSourceRules: inbound from these sources is never redirected.
func skipSourceRules(s Spec) []Rule {
	var out []Rule
	if len(s.SkipSubnets) > 0 {
		out = append(out, Rule{Src: s.SkipSubnets, Verdict: Verdict{Kind: Return}, Comment: cm("skip-subnets")})
	}
	if len(s.SkipInboundSources) > 0 {
		out = append(out, Rule{Src: s.SkipInboundSources, Verdict: Verdict{Kind: Return}, Comment: cm("skip-inbound-sources")})
	}
	return out
}

// dnsRules send port 53 (UDP, and TCP unless DNSUDPOnly; to DNSDest
// only, when set) to the DNS port.
func dnsRules(s Spec) []Rule {
	if !s.CaptureDNS {
		return nil
	}
	dns := []PortRange{{DNSPort, DNSPort}}
	to := Verdict{Kind: RedirectTo, Port: s.DNSPort}
	out := []Rule{{Proto: UDP, Dst: s.DNSDest, DPorts: dns, Verdict: to, Comment: cm("dns")}}
	if !s.DNSUDPOnly {
		out = append(out, Rule{Proto: TCP, Dst: s.DNSDest, DPorts: dns, Verdict: to, Comment: cm("dns")})
	}
	return out
}

// exemptRules return the declared owners' traffic: a port list needs a
// protocol, so "any" with ports is one rule per protocol.
func exemptRules(s Spec) []Rule {
	var out []Rule
	for _, e := range s.ExemptUIDs {
		r := Rule{UID: ptr(e.First), DPorts: e.Ports, Verdict: Verdict{Kind: Return}, Comment: cm("exempt-uid")}
		if e.Last > e.First {
			r.UIDTo = e.Last
		}
		protos := []Proto{e.Proto}
		if e.Proto == AnyProto && len(e.Ports) > 0 {
			protos = []Proto{TCP, UDP}
		}
		for _, p := range protos {
			r.Proto = p
			out = append(out, r)
		}
	}
	return out
}

func excludeIfaceRules(s Spec, in bool) []Rule {
	var out []Rule
	for _, name := range s.ExcludeIfaces {
		r := Rule{Verdict: Verdict{Kind: Return}, Comment: cm("exclude-interface")}
		if in {
			r.InIface = name
		} else {
			r.OutIface = name
		}
		out = append(out, r)
	}
	return out
}

// proxyRules returns one rule per proxy identity (UID, then GID) with v.
func proxyRules(s Spec, base Rule) []Rule {
	uid := base
	uid.UID = ptr(s.ProxyUID)
	out := []Rule{uid}
	if s.ProxyGID != nil {
		gid := base
		gid.GID = ptr(*s.ProxyGID)
		gid.Comment = base.Comment + "-gid"
		out = append(out, gid)
	}
	return out
}

// proxySelfChain is the proxy's path to its own pod IP. Istio
// (tools/istio-iptables/pkg/capture/run.go Run: the outbound port
// exclusions come first, then "-o lo ! -d 127.0.0.1/32 ... ! --dport
// 15008 --uid-owner 1337 -j ISTIO_IN_REDIRECT", a chain with only the
// REDIRECT) and Kuma (pkg/transparentproxy/iptables/builder/
// builder_table_nat.go buildMeshOutbound: exclude-outbound-ports, then the
// jump to MESH_INBOUND_REDIRECT) ignore the inbound port rules here: the
// outbound-excluded ports, the tunnel port and, when TCP DNS is captured,
// port 53 go direct; every other port goes to the inbound port, even for a
// gateway or a narrow inbound port list. A RETURN here goes back to
// MESH_OUTPUT, where the proxy's own RETURN follows.
func proxySelfChain(s Spec) Chain {
	c := Chain{Name: ChainProxySelf}
	ret := Verdict{Kind: Return}
	var direct []PortRange
	if !s.IgnoreOutboundFirst { // else MESH_OUTPUT returned them already
		direct = slices.Clone(s.IgnoreOutbound)
	}
	if s.TunnelPort != 0 {
		direct = append(direct, PortRange{s.TunnelPort, s.TunnelPort})
	}
	if s.CaptureDNS && !s.DNSUDPOnly {
		direct = append(direct, PortRange{DNSPort, DNSPort})
	}
	if direct = mergePorts(direct); len(direct) > 0 {
		c.Rules = append(c.Rules, Rule{Proto: TCP, DPorts: direct, Verdict: ret, Comment: cm("proxy-to-self-direct")})
	}
	c.Rules = append(c.Rules, Rule{Proto: TCP, Verdict: Verdict{Kind: RedirectTo, Port: s.InboundPort}, Comment: cm("proxy-to-self-redirect")})
	return c
}

func outputChain(s Spec) Chain {
	c := Chain{Name: ChainOutput, Hook: Output}
	ret := Verdict{Kind: Return}
	ignore := Rule{DPorts: s.IgnoreOutbound, Verdict: ret, Comment: cm("outbound-ignore-ports")}
	if s.IgnoreOutboundFirst && len(s.IgnoreOutbound) > 0 {
		// Istio returns excluded ports, TCP and UDP, ahead of every
		// other outbound rule (istio.io/istio tools/istio-iptables/pkg/
		// capture/run.go:282-288; istio-nftables run.go:336-342).
		for _, p := range []Proto{TCP, UDP} {
			r := ignore
			r.Proto = p
			c.Rules = append(c.Rules, r)
		}
	}
	if s.DNSFirst {
		c.Rules = append(c.Rules, dnsRules(s)...)
	}
	c.Rules = append(c.Rules, excludeIfaceRules(s, false)...)
	skip := s.SkipOutboundSubnets
	skipRule := Rule{Dst: skip, Verdict: ret, Comment: cm("skip-subnets")}
	if s.ExemptDNS {
		// Kuma returns its excluded destinations and owners in OUTPUT,
		// before DNS capture and before the jump to the chain that holds
		// the proxy's path to its own pod (kumahq/kuma v2.14.3
		// builder_table_nat.go:228-252, 308-316; buildMeshOutbound 86-170).
		c.Rules = append(c.Rules, exemptRules(s)...)
		if len(skip) > 0 {
			c.Rules = append(c.Rules, skipRule)
		}
	}
	if s.LoopbackToInbound {
		c.Rules = append(c.Rules, Rule{OutIface: "lo", Src: passthroughSources, Verdict: ret, Comment: cm("inbound-passthrough")})
		// The proxy calling its own pod (a Service VIP that resolved to
		// itself) gets the inbound treatment, in both modes, as Istio and
		// Kuma do. By UID only: Kuma has no GID rule, and Istio's GID rule
		// comes after "-o lo ! --uid-owner <proxy> -j RETURN", so only the
		// proxy's UID ever reaches it (a root proxy of group 1337 goes
		// direct in nat; in TPROXY mode its mark 1338 still applies).
		c.Rules = append(c.Rules, Rule{Proto: TCP, OutIface: "lo", Dst: loopbackHosts, NotDst: true, UID: ptr(s.ProxyUID),
			Verdict: Verdict{Kind: Jump, Chain: ChainProxySelf}, Comment: cm("proxy-to-self")})
	}
	c.Rules = append(c.Rules, proxyRules(s, Rule{Verdict: ret, Comment: cm("proxy")})...)
	if !s.DNSFirst {
		c.Rules = append(c.Rules, dnsRules(s)...)
	}
	if !s.ExemptDNS {
		c.Rules = append(c.Rules, exemptRules(s)...)
	}
	c.Rules = append(c.Rules, Rule{OutIface: "lo", Verdict: ret, Comment: cm("loopback")})
	if len(s.IgnoreOutbound) > 0 && !s.IgnoreOutboundFirst {
		ignore.Proto = TCP
		c.Rules = append(c.Rules, ignore)
	}
	// SkipSubnets is Linkerd's skip-subnets: inbound sources only.
	if len(skip) > 0 && !s.ExemptDNS {
		c.Rules = append(c.Rules, skipRule)
	}
	redirect := Verdict{Kind: RedirectTo, Port: s.OutboundPort}
	if s.IncludeSubnets == nil {
		c.Rules = append(c.Rules, Rule{Proto: TCP, Verdict: redirect, Comment: cm("outbound-redirect")})
		return c
	}
	if len(s.IncludeSubnets) > 0 {
		c.Rules = append(c.Rules, Rule{Proto: TCP, Dst: s.IncludeSubnets, Verdict: redirect, Comment: cm("outbound-include-subnets")})
	}
	if len(s.IncludeOutbound) > 0 {
		c.Rules = append(c.Rules, Rule{Proto: TCP, DPorts: s.IncludeOutbound, Verdict: redirect, Comment: cm("outbound-include-ports")})
	}
	return c
}

// tproxyChains is the mangle table of TPROXY mode, after Istio's layout:
// new inbound connections are TPROXYed to the inbound port with TProxyMark,
// established ones are marked and accepted, and the mark is kept in
// conntrack so replies of the proxy's transparent upstream connections are
// routed back to it through RouteTable.
func tproxyChains(s Spec) []Chain {
	ret := Verdict{Kind: Return}
	mark := &Mark{TProxyMark, fullMask}
	divert := Chain{Name: ChainDivert, Rules: []Rule{
		{Verdict: Verdict{Kind: SetMark, Mark: *mark}, Comment: cm("divert-mark")},
		{Verdict: Verdict{Kind: Accept}, Comment: cm("divert")},
	}}
	// The drop makes nft fail closed like iptables: nft's tproxy does not
	// match when no proxy socket takes the packet, and the connection
	// would reach the app directly. iptables' TPROXY never gets there.
	toProxy := Rule{Proto: TCP, Dst: loopbackHosts, NotDst: true,
		Verdict: Verdict{Kind: TProxyTo, Port: s.InboundPort, Mark: *mark}, Comment: cm("tproxy")}
	noProxy := toProxy
	noProxy.Verdict, noProxy.Comment = Verdict{Kind: Drop}, cm("tproxy-no-proxy")
	tproxy := Chain{Name: ChainTProxy, Rules: []Rule{toProxy, noProxy}}

	in := Chain{Name: ChainTProxyInbound, Hook: PreRouting}
	in.Rules = append(in.Rules, excludeIfaceRules(s, true)...)
	// The mark is saved for packets that come in on lo only: the
	// proxy's transparent upstream sockets carry it from their socket mark.
	// A packet from another interface crosses from another netns, which
	// clears its mark, so it has the mark here only if another plugin's
	// mangle chain (istio-cni's, chained with ours: docs/istio.md) set it
	// on an inbound connection; saved, replies would take RouteTable to lo.
	in.Rules = append(in.Rules,
		Rule{Proto: TCP, InIface: "lo", Mark: mark, Verdict: Verdict{Kind: ConnmarkSave}, Comment: cm("tproxy-save-mark")},
		Rule{Proto: TCP, Mark: mark, Verdict: ret, Comment: cm("tproxy-marked")})
	if s.LoopbackToInbound {
		in.Rules = append(in.Rules,
			Rule{Proto: TCP, InIface: "lo", Src: passthroughSources, Verdict: ret, Comment: cm("inbound-passthrough")},
			Rule{Proto: TCP, InIface: "lo", Mark: &Mark{LoopMark, fullMask}, NotMark: true, Verdict: ret, Comment: cm("loopback")})
	} else {
		in.Rules = append(in.Rules, Rule{Proto: TCP, InIface: "lo", Verdict: ret, Comment: cm("loopback")})
	}
	// Not the tunnel port: Istio exempts it in its nat chain only
	// (run.go Run, "ISTIO_INBOUND nat ... --dport 15008 -j RETURN"), so in
	// TPROXY mode inbound 15008 is tproxied to the inbound port.
	if len(s.IgnoreInbound) > 0 {
		in.Rules = append(in.Rules, Rule{Proto: TCP, DPorts: s.IgnoreInbound, Verdict: ret, Comment: cm("inbound-ignore-ports")})
	}
	in.Rules = append(in.Rules, skipSourceRules(s)...)
	in.Rules = append(in.Rules, Rule{Proto: TCP, CtState: []string{"RELATED", "ESTABLISHED"},
		Verdict: Verdict{Kind: Jump, Chain: ChainDivert}, Comment: cm("tproxy-established")})
	toTProxy := Verdict{Kind: Jump, Chain: ChainTProxy}
	switch {
	case s.InboundPorts == nil:
		in.Rules = append(in.Rules, Rule{Proto: TCP, Verdict: toTProxy, Comment: cm("inbound-tproxy")})
	case len(s.InboundPorts) > 0:
		in.Rules = append(in.Rules, Rule{Proto: TCP, DPorts: s.InboundPorts, Verdict: toTProxy, Comment: cm("inbound-tproxy-ports")})
	}

	out := Chain{Name: ChainTProxyOutput, Hook: Output}
	out.Rules = append(out.Rules, Rule{Proto: TCP, CtMark: mark, Verdict: Verdict{Kind: ConnmarkRestore}, Comment: cm("tproxy-restore-mark")})
	if s.LoopbackToInbound {
		out.Rules = append(out.Rules, proxyRules(s, Rule{Proto: TCP, OutIface: "lo", Dst: loopbackHosts, NotDst: true,
			Verdict: Verdict{Kind: SetMark, Mark: Mark{LoopMark, fullMask}}, Comment: cm("proxy-to-self")})...)
	}
	return []Chain{divert, tproxy, in, out}
}

func cm(s string) string { return commentPrefix + s }

func ptr[T any](v T) *T { return &v }
