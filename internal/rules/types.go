// IR notes (additions since the first version; nothing renamed):
//   - Rule.CtMark matches the conntrack mark (iptables "-m connmark --mark",
//     nft "ct mark"); TPROXY needs it to restore the mark on replies only.
//   - Spec.SkipOutboundSubnets skips destinations only (istio
//     excludeOutboundIPRanges); Spec.SkipSubnets skips inbound connections
//     by source only, as Linkerd's skip-subnets does.
//   - Spec.IncludeOutbound and Spec.IncludeSubnets combine with OR, as Istio's
//     includeOutboundPorts/includeOutboundIPRanges do: a connection is
//     redirected outbound when its destination is in IncludeSubnets (nil:
//     every destination) or its port is in IncludeOutbound. An empty,
//     non-nil InboundPorts redirects no inbound port.
//   - Spec.LoopbackToInbound sends the proxy's own connections to a local,
//     non-loopback address to the inbound port, save the outbound-excluded
//     and tunnel ports (istio's "VIP to self" rule; chain MESH_PROXY_SELF).
//   - Layout the backends share (see README.md): nft is one "table inet
//     mesh_cni" holding every chain of every Table; a hooked chain is a base
//     chain: nat PREROUTING/OUTPUT "type nat priority -100", mangle
//     PREROUTING "type filter priority -150", mangle OUTPUT "type route
//     priority -150". iptables: a hooked chain is a user chain jumped to
//     from the built-in chain of its table. Chain names are unique across
//     tables. NotDPorts lists always fit one multiport match (<= 15 refs),
//     and a negated address list holds at most one prefix per family.
//   - nft: with a single family in RuleSet.Families, a rule without an
//     address match also matches "meta nfproto" of that family (so nft and
//     iptables program the same traffic). See rules.NftRule, NftBaseChain.
//   - Spec.DNSFirst puts DNS capture before the proxy's RETURN (Consul);
//     with Spec.ExemptDNS the exempt UIDs and outbound skip subnets come
//     before DNS capture and the proxy's path to its own pod (Kuma).
//     Spec.IgnoreOutboundFirst returns IgnoreOutbound, TCP and UDP, ahead
//     of every other outbound rule (Istio). Spec.DropInvalid adds mangle PREROUTING chain
//     MESH_DROP_INVALID (ct state INVALID, drop). Spec.LoopbackAddrs become
//     RuleSet.LoopbackAddrs (those of the programmed families), which the
//     plugin adds to lo; no backend writes them.
//   - Verdict kind Drop ("-j DROP", nft "drop"; not in the nat table). TPROXY
//     mode follows the TPROXY rule with a drop of the same match: nft's
//     tproxy is not terminal, and without it a connection reached the app
//     directly while no proxy listened (iptables' TPROXY drops it).

// Package rules turns a redirect Spec into a RuleSet: a backend-neutral
// description of the tables, chains and rules one pod netns gets. It is
// pure: no I/O, no netlink, no exec. Backends render or program a RuleSet.
package rules

import "net/netip"

// Family is an address family the pod has an address in.
type Family uint8

const (
	IPv4 Family = 4
	IPv6 Family = 6
)

func (f Family) String() string {
	if f == IPv6 {
		return "ipv6"
	}
	return "ipv4"
}

// Mode is how inbound traffic reaches the proxy.
type Mode string

const (
	Redirect Mode = "REDIRECT"
	TProxy   Mode = "TPROXY"
)

// PortRange is an inclusive range; a single port has First == Last.
type PortRange struct{ First, Last uint16 }

// Spec is the full input of Generate: one pod's redirect, already resolved
// from profile defaults, plugin config and pod annotations.
type Spec struct {
	Mesh         string
	Families     []Family // families the pod has addresses in
	ProxyUID     uint32
	ProxyGID     *uint32 // nil: no GID exemption
	InboundPort  uint16
	OutboundPort uint16
	TunnelPort   uint16 // 0: none
	Mode         Mode

	InboundPorts    []PortRange // nil: every port
	IgnoreInbound   []PortRange
	IncludeOutbound []PortRange // nil: every port
	IgnoreOutbound  []PortRange
	IncludeSubnets  []netip.Prefix // nil: every destination
	SkipSubnets     []netip.Prefix // inbound sources only (Linkerd's skip-subnets)
	ExcludeIfaces   []string

	SkipOutboundSubnets []netip.Prefix // destinations only
	LoopbackToInbound   bool           // proxy to a local non-loopback address goes inbound

	// IgnoreOutboundFirst: IgnoreOutbound applies to UDP too and comes
	// first, before DNS capture and the proxy's path to its own pod
	// (Istio's excludeOutboundPorts). Otherwise it is TCP only, after DNS
	// capture (Linkerd's, Kuma's and Consul's excluded outbound ports).
	IgnoreOutboundFirst bool

	CaptureDNS bool
	DNSPort    uint16
	// DNSUDPOnly captures UDP port 53 only (Kuma's DNS proxy serves no
	// TCP); DNSDest limits the capture to these destinations (Consul
	// captures what goes to its local resolver; nil: every destination).
	DNSUDPOnly bool
	DNSDest    []netip.Prefix
	// DNSFirst puts DNS capture before the proxy's own exemption, so the
	// proxy's queries reach the DNS port too (Consul's DNS rule sits in
	// OUTPUT before its proxy RETURN, with no owner match).
	DNSFirst bool
	// DropInvalid drops conntrack-INVALID packets in mangle PREROUTING
	// (Kuma's drop-invalid-packets).
	DropInvalid bool
	// LoopbackAddrs are added to lo before the rules (Kuma's inbound
	// passthrough source ::6 when IPv6 is redirected). They stay until the
	// netns goes: the mesh's own plugin never removes them either.
	LoopbackAddrs []netip.Prefix

	// ExemptUIDs are further owners whose outbound traffic is not
	// redirected (Consul's ExcludeUIDs, Kuma's excludePortsForUIDs): the
	// pod's own, declared exemptions, matched after DNS capture.
	ExemptUIDs []UIDExemption
	// ExemptDNS: ExemptUIDs and the outbound skip subnets come before DNS
	// capture and the proxy's path to its own pod, so they skip both
	// (Kuma's order); otherwise DNS capture applies to them (Consul's).
	ExemptDNS bool
	// SkipInboundSources: inbound connections from these sources are not
	// redirected (Kuma's inbound excludePortsForIPs).
	SkipInboundSources []netip.Prefix
}

// UIDExemption exempts the outbound traffic of UIDs First..Last; with
// Proto set, of that protocol only, and with Ports, to those ports only.
type UIDExemption struct {
	First, Last uint32
	Proto       Proto
	Ports       []PortRange
}

// RuleSet is everything mesh-cni programs into one pod netns. Tables hold
// rules for both families; an address match limits a rule to its family,
// and a rule whose address list has no prefix of a family is left out of it.
type RuleSet struct {
	Families []Family
	Tables   []Table
	// PolicyRoutes are needed by TPROXY: "ip rule fwmark Mark lookup Table"
	// plus "local default dev lo table Table", per family.
	PolicyRoutes []PolicyRoute
	// LoopbackAddrs are addresses the pod's lo must hold (Spec.LoopbackAddrs).
	LoopbackAddrs []netip.Prefix
}

// PolicyRoute is a fwmark rule and its local route table.
type PolicyRoute struct {
	Mark  uint32
	Table int
}

// Table is one netfilter table: "nat", "mangle" or "raw".
type Table struct {
	Name   string
	Chains []Chain
}

// Hook attaches a chain to a netfilter hook. Empty: a regular chain reached
// only by jumps.
type Hook string

const (
	NoHook     Hook = ""
	PreRouting Hook = "PREROUTING"
	Output     Hook = "OUTPUT"
)

// Chain is one of our chains. All names start with "MESH_".
type Chain struct {
	Name  string
	Hook  Hook
	Rules []Rule
}

// Proto is the L4 protocol match.
type Proto string

const (
	AnyProto Proto = ""
	TCP      Proto = "tcp"
	UDP      Proto = "udp"
)

// Rule is one match + verdict. Every set field must match.
type Rule struct {
	Proto       Proto
	InIface     string
	NotInIface  bool
	OutIface    string
	NotOutIface bool
	Src         []netip.Prefix
	NotSrc      bool
	Dst         []netip.Prefix
	NotDst      bool
	DPorts      []PortRange
	NotDPorts   bool
	SPorts      []PortRange
	UID         *uint32
	UIDTo       uint32 // above *UID: the range UID..UIDTo (not negated)
	NotUID      bool
	GID         *uint32
	NotGID      bool
	Mark        *Mark
	NotMark     bool
	CtMark      *Mark    // conntrack mark match
	CtState     []string // e.g. "RELATED", "ESTABLISHED"
	Verdict     Verdict
	Comment     string
}

// Mark is a value/mask pair.
type Mark struct{ Value, Mask uint32 }

// VerdictKind is what a matching rule does.
type VerdictKind string

const (
	Return          VerdictKind = "RETURN"
	Jump            VerdictKind = "JUMP"
	Accept          VerdictKind = "ACCEPT"
	Drop            VerdictKind = "DROP"
	RedirectTo      VerdictKind = "REDIRECT"
	TProxyTo        VerdictKind = "TPROXY"
	SetMark         VerdictKind = "MARK"
	ConnmarkSave    VerdictKind = "CONNMARK_SAVE"
	ConnmarkRestore VerdictKind = "CONNMARK_RESTORE"
)

// Verdict is the action of a rule.
type Verdict struct {
	Kind  VerdictKind
	Chain string // Jump
	Port  uint16 // RedirectTo, TProxyTo
	Mark  Mark   // TProxyTo, SetMark
}
