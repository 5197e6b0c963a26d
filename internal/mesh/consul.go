package mesh

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/mesh-cni/mesh-cni/internal/echo"
	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// Consul on Kubernetes' pod contract (hashicorp/consul-k8s v1.9 to v2.0,
// control-plane/cni/main.go; internal/mesh/README.md).
const (
	ConsulInjectStatus     = "consul.hashicorp.com/connect-inject-status"
	ConsulMeshInjectStatus = "consul.hashicorp.com/mesh-inject-status"
	ConsulTProxyStatus     = "consul.hashicorp.com/transparent-proxy-status"
	ConsulRedirectConfig   = "consul.hashicorp.com/redirect-traffic-config"
	// ConsulDualStack: "true" makes the sdk want an IPv6 ConsulDNSIP and
	// IPv6-only CIDRs; anything else, IPv4 (consul-k8s v2.0.3
	// control-plane/cni/main.go:395-405; the injector always writes it,
	// webhook/mesh_webhook.go:509,596-598).
	ConsulDualStack = "consul.hashicorp.com/dual-stack"
)

// ConsulRedirect is the redirect configuration Consul's injector computes
// for a pod and serialises into ConsulRedirectConfig: the JSON of
// iptables.Config in github.com/hashicorp/consul/sdk (v0.18.1), whose
// fields carry no JSON tags, so the keys are the Go field names. It is the
// single source of the pod's rules.
type ConsulRedirect struct {
	ConsulDNSIP          string
	ConsulDNSPort        int
	ProxyUserID          string
	ProxyInboundPort     int
	ProxyOutboundPort    int
	ExcludeInboundPorts  []string
	ExcludeOutboundPorts []string
	ExcludeOutboundCIDRs []string
	ExcludeUIDs          []string
	// Set by the consul-cni plugin at run time, never by the injector:
	// accepted and ignored.
	NetNS            string
	IptablesProvider json.RawMessage
}

// ParseConsulRedirect decodes and checks the configuration field by field.
// An unknown key is an error naming it. Keys match exactly (Go's decoder
// would also take "proxyuserid").
func ParseConsulRedirect(raw string) (ConsulRedirect, error) {
	var c ConsulRedirect
	var keys map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &keys); err != nil {
		return c, fmt.Errorf("not a JSON object: %w", err)
	}
	known := map[string]bool{}
	for _, f := range consulFields {
		known[f] = true
	}
	for k := range keys {
		if !known[k] {
			return c, fmt.Errorf("unknown field %q (known: %s)", echo.Clip(k), strings.Join(consulFields, ", "))
		}
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return c, fmt.Errorf("field %s: %s is not a %s", te.Field, te.Value, te.Type)
		}
		return c, err
	}
	if len(c.IptablesProvider) > 0 && string(c.IptablesProvider) != "null" {
		return c, errors.New("field IptablesProvider: must be null")
	}
	return c, nil
}

// consulFields are ConsulRedirect's keys, in order.
var consulFields = []string{"ConsulDNSIP", "ConsulDNSPort", "ProxyUserID", "ProxyInboundPort", "ProxyOutboundPort",
	"ExcludeInboundPorts", "ExcludeOutboundPorts", "ExcludeOutboundCIDRs", "ExcludeUIDs", "NetNS", "IptablesProvider"}

// spec turns the configuration into the pod's Spec over base (the mesh's
// identity and family settings). Errors name the field.
func (c ConsulRedirect) spec(s rules.Spec, dualStack bool) (rules.Spec, error) {
	field := func(f string, err error) error { return fmt.Errorf("field %s: %w", f, err) }
	// Nothing of the profile's own lists applies: the pod's configuration
	// is the whole of its rules. Consul redirects with nat only.
	s = rules.Spec{Mesh: s.Mesh, ProxyGID: s.ProxyGID, Mode: rules.Redirect}
	var err error
	if c.ProxyUserID == "" {
		return s, field("ProxyUserID", errors.New("is required: the proxy's own traffic must not be redirected"))
	}
	if s.ProxyUID, err = parseID(c.ProxyUserID); err != nil {
		return s, field("ProxyUserID", err)
	}
	if s.InboundPort, err = checkPort(c.ProxyInboundPort, false); err != nil {
		return s, field("ProxyInboundPort", err)
	}
	if s.OutboundPort, err = checkPort(c.ProxyOutboundPort, true); err != nil {
		return s, field("ProxyOutboundPort", err)
	}
	if s.OutboundPort == 0 { // the SDK's default
		s.OutboundPort = 15001
	}
	if s.InboundPort == s.OutboundPort {
		return s, field("ProxyOutboundPort", fmt.Errorf("%d is also the inbound port", s.OutboundPort))
	}
	lists := []struct {
		name string
		v    []string
		dst  *[]rules.PortRange
	}{{"ExcludeInboundPorts", c.ExcludeInboundPorts, &s.IgnoreInbound}, {"ExcludeOutboundPorts", c.ExcludeOutboundPorts, &s.IgnoreOutbound}}
	for _, l := range lists {
		*l.dst = nil
		for _, v := range l.v {
			r, err := consulPort(v)
			if err != nil {
				return s, field(l.name, err)
			}
			*l.dst = append(*l.dst, r)
		}
	}
	if s.SkipOutboundSubnets, err = ParseCIDRs(strings.Join(c.ExcludeOutboundCIDRs, ",")); err != nil {
		return s, field("ExcludeOutboundCIDRs", err)
	}
	for _, p := range s.SkipOutboundSubnets {
		// The sdk hands every CIDR to iptables, which refuses an IPv6 one
		// (iptables.go:225-227): consul-cni's ADD fails.
		if p.Addr().Is6() && !dualStack {
			return s, field("ExcludeOutboundCIDRs", fmt.Errorf("%s is IPv6 but %s is not \"true\"", p, ConsulDualStack))
		}
	}
	s.ExemptUIDs = nil
	for _, u := range c.ExcludeUIDs {
		// iptables' --uid-owner takes a UID or a range (iptables.go:229-231).
		first, last, err := uidRange(u)
		if err != nil {
			return s, field("ExcludeUIDs", fmt.Errorf("%w (a user name is not taken: it would be looked up on the node, not in the container)", err))
		}
		s.ExemptUIDs = append(s.ExemptUIDs, rules.UIDExemption{First: first, Last: last})
	}
	s.IgnoreInbound, s.IgnoreOutbound = nilIfEmpty(s.IgnoreInbound), nilIfEmpty(s.IgnoreOutbound)
	s.SkipOutboundSubnets = nilIfEmpty(s.SkipOutboundSubnets)
	return c.dns(s, dualStack)
}

// consulPort reads one port as iptables' --dport takes it, the way the
// sdk passes it (iptables.go:221-223, 245-247): "80" or "8000:8100". A
// dash range or a service name is refused: iptables refuses the first,
// and would resolve the second on the node.
func consulPort(v string) (rules.PortRange, error) {
	t := strings.TrimSpace(v)
	if strings.Contains(t, "-") {
		return rules.PortRange{}, fmt.Errorf("invalid port %q: iptables takes a range as first:last", v)
	}
	r, err := parseRange(strings.Replace(t, ":", "-", 1))
	if err != nil {
		return rules.PortRange{}, fmt.Errorf("invalid port %q: want a port from 1 to %d or first:last", v, MaxPort)
	}
	return r, nil
}

// dns: with ConsulDNSPort set, DNS sent to ConsulDNSIP (127.0.0.1 or ::1,
// Consul's local resolver) goes to that port, whoever sends it: the sdk's
// DNS rule sits in OUTPUT before the proxy's RETURN, with no owner match
// (iptables.go:192-209). The family follows dual-stack: IPv4 without it,
// IPv6 with it, the other refused (iptables.go:103-126, 182, 295-299).
// Consul before 1.0 DNATed every DNS query to a Service IP (ConsulDNSPort
// absent): that form is refused, it cannot be a local redirect.
func (c ConsulRedirect) dns(s rules.Spec, dualStack bool) (rules.Spec, error) {
	s.CaptureDNS, s.DNSDest, s.DNSUDPOnly, s.DNSFirst = false, nil, false, true
	if c.ConsulDNSPort == 0 {
		if c.ConsulDNSIP != "" {
			return s, errors.New("field ConsulDNSPort: is required with ConsulDNSIP (the redirect of all DNS to a Service IP, consul-k8s before 1.0, is not supported)")
		}
		return s, nil
	}
	if _, err := checkPort(c.ConsulDNSPort, false); err != nil {
		return s, fmt.Errorf("field ConsulDNSPort: %w", err)
	}
	ip := netip.MustParseAddr("127.0.0.1")
	if dualStack {
		ip = netip.IPv6Loopback()
	}
	if c.ConsulDNSIP != "" {
		var err error
		if ip, err = netip.ParseAddr(c.ConsulDNSIP); err != nil || !ip.IsLoopback() {
			return s, fmt.Errorf("field ConsulDNSIP: %q is not a loopback address (Consul's local resolver)", echo.Clip(c.ConsulDNSIP))
		}
		if ip.Is6() != dualStack {
			return s, fmt.Errorf("field ConsulDNSIP: %s with %s %q: the sdk wants an %s address", ip, ConsulDualStack, strconv.FormatBool(dualStack), map[bool]string{false: "IPv4", true: "IPv6"}[dualStack])
		}
	}
	s.CaptureDNS, s.DNSPort = true, uint16(c.ConsulDNSPort)
	s.DNSDest = []netip.Prefix{netip.PrefixFrom(ip, ip.BitLen())}
	return s, nil
}

// judgeConsul follows consul-cni: the pod is injected (connect-inject or
// mesh-inject status set) with transparent proxy (its status set to any
// value: consul-cni rewrites it to waiting and complete). The injector
// writes the redirect configuration only in CNI mode; without it the
// pod's init container redirects it (skipped as init-container mode).
func judgeConsul(cfg Config, base rules.Spec, pod Pod) (judgement, error) {
	ann := pod.Annotations
	if ann[ConsulInjectStatus] == "" && ann[ConsulMeshInjectStatus] == "" {
		return judgement{v: notMine}, nil
	}
	if ann[ConsulTProxyStatus] == "" {
		return judgement{v: skipped, reason: ReasonNotInjected}, nil
	}
	raw, ok := ann[ConsulRedirectConfig]
	if !ok {
		return judgement{v: skipped, reason: ReasonInitContainerMode}, nil
	}
	var proxy *Container
	if pod.SpecKnown {
		if proxy = sidecar(pod, cfg.Sidecar); proxy == nil {
			return judgement{v: skipped, reason: ReasonNoSidecar}, nil
		}
	} else if !trusted(cfg) {
		return judgement{v: needSpec}, nil
	}
	rc, err := ParseConsulRedirect(raw)
	if err == nil {
		base, err = rc.spec(base, ann[ConsulDualStack] == "true")
	}
	if err != nil {
		return judgement{}, annErr(ConsulRedirectConfig, raw, err)
	}
	return meshedAs(base, pod, proxy)
}
