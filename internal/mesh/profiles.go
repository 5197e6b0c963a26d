package mesh

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// Profiles lists the known profile names.
var Profiles = []string{Linkerd, Istio, Kuma, Consul, Custom}

// Sidecars is every sidecar profile on, each with its defaults: how a
// person's tools (explain, check) judge a pod when no chain entry says
// which meshes run.
func Sidecars() map[string]Config {
	on := true
	return map[string]Config{Linkerd: {}, Istio: {}, Kuma: {Enabled: &on}, Consul: {Enabled: &on}}
}

// OnWhenConfigured says whether a profile that is off by default is turned
// on by an entry under its name that does not say "enabled": the custom
// profile has no defaults to run with, so configuring it is asking for it.
func OnWhenConfigured(name string) bool { return name == Custom }

func ptr[T any](v T) *T { return &v }

// WithDefaults fills every unset field of c from profile name's defaults.
// A list set to [] stays empty: that is how a default list is cleared.
func (c Config) WithDefaults(name string) Config {
	d, err := Defaults(name)
	if err != nil {
		return c
	}
	fillPtr(&c.Enabled, d.Enabled)
	fillPtr(&c.ProxyUID, d.ProxyUID)
	fillPtr(&c.ProxyGID, d.ProxyGID)
	fillPtr(&c.CaptureDNS, d.CaptureDNS)
	fillPtr(&c.LoopbackToInbound, d.LoopbackToInbound)
	fillPtr(&c.TrustAnnotations, d.TrustAnnotations)
	fill(&c.Sidecar, d.Sidecar)
	fill(&c.SelectAnnotation, d.SelectAnnotation)
	fill(&c.InboundPort, d.InboundPort)
	fill(&c.OutboundPort, d.OutboundPort)
	fill(&c.TunnelPort, d.TunnelPort)
	fill(&c.DNSPort, d.DNSPort)
	fill(&c.InterceptionMode, d.InterceptionMode)
	for _, l := range []struct{ dst, src *[]string }{
		{&c.InboundPorts, &d.InboundPorts}, {&c.IgnoreInbound, &d.IgnoreInbound},
		{&c.IgnoreOutbound, &d.IgnoreOutbound}, {&c.IncludeOutbound, &d.IncludeOutbound},
		{&c.SkipSubnets, &d.SkipSubnets}, {&c.SkipOutboundSubnets, &d.SkipOutboundSubnets}, {&c.IncludeSubnets, &d.IncludeSubnets},
		{&c.ExcludeIfaces, &d.ExcludeIfaces},
	} {
		if *l.dst == nil {
			*l.dst = slices.Clone(*l.src)
		}
	}
	return c
}

func fillPtr[T any](dst **T, def *T) {
	if *dst == nil && def != nil {
		*dst = ptr(*def)
	}
}

func fill[T comparable](dst *T, def T) {
	var zero T
	if *dst == zero {
		*dst = def
	}
}

func (c Config) enabled() bool { return c.Enabled != nil && *c.Enabled }

// Validate checks profile name's effective settings (c over the defaults).
// A disabled mesh is only checked for its name.
func Validate(name string, c Config) error {
	if _, err := Defaults(name); err != nil {
		return err
	}
	_, err := c.WithDefaults(name).base(name)
	return err
}

// base resolves an effective Config into the Spec every pod of the mesh
// starts from; pod annotations then override it. Errors name the field.
func (c Config) base(name string) (rules.Spec, error) {
	s := rules.Spec{Mesh: name}
	if !c.enabled() {
		return s, nil
	}
	field := func(f string, err error) error { return fmt.Errorf("meshes.%s.%s: %w", name, f, err) }
	if c.Sidecar == "" && c.SelectAnnotation == "" {
		return s, field("sidecar", fmt.Errorf("the %s profile needs sidecar or selectAnnotation to know its pods", name))
	}
	if c.SelectAnnotation != "" {
		if k, _, _ := strings.Cut(c.SelectAnnotation, "="); strings.TrimSpace(k) == "" {
			return s, field("selectAnnotation", fmt.Errorf("%q has no annotation key", c.SelectAnnotation))
		}
	}
	if err := c.basePorts(&s, field); err != nil {
		return s, err
	}
	var err error
	if s.Mode, err = checkMode(c.InterceptionMode); err != nil {
		return s, field("interceptionMode", err)
	}
	if err := c.baseLists(&s, field); err != nil {
		return s, err
	}
	// Empty skip and ignore lists are nil; only the include lists tell
	// nil (every) from empty (none).
	s.IgnoreInbound, s.IgnoreOutbound = nilIfEmpty(s.IgnoreInbound), nilIfEmpty(s.IgnoreOutbound)
	s.IncludeOutbound, s.SkipSubnets = nilIfEmpty(s.IncludeOutbound), nilIfEmpty(s.SkipSubnets)
	s.ExcludeIfaces, s.SkipOutboundSubnets = nilIfEmpty(s.ExcludeIfaces), nilIfEmpty(s.SkipOutboundSubnets)
	s.CaptureDNS = c.CaptureDNS != nil && *c.CaptureDNS
	s.LoopbackToInbound = c.LoopbackToInbound != nil && *c.LoopbackToInbound
	return s, nil
}

// basePorts checks the proxy's ports and identity into s.
func (c Config) basePorts(s *rules.Spec, field func(string, error) error) error {
	var err error
	ports := []struct {
		name string
		v    int
		dst  *uint16
		need bool
	}{
		{"inboundPort", c.InboundPort, &s.InboundPort, true},
		{"outboundPort", c.OutboundPort, &s.OutboundPort, true},
		{"tunnelPort", c.TunnelPort, &s.TunnelPort, false},
		{"dnsPort", c.DNSPort, &s.DNSPort, c.CaptureDNS != nil && *c.CaptureDNS},
	}
	for _, p := range ports {
		if *p.dst, err = checkPort(p.v, !p.need); err != nil {
			return field(p.name, err)
		}
	}
	if s.InboundPort == s.OutboundPort {
		return field("outboundPort", fmt.Errorf("%d is also the inbound port", s.OutboundPort))
	}
	if c.ProxyUID == nil {
		return field("proxyUID", errors.New("is required: the proxy's own traffic must not be redirected"))
	}
	if s.ProxyUID, err = checkID(*c.ProxyUID); err != nil {
		return field("proxyUID", err)
	}
	if c.ProxyGID != nil && *c.ProxyGID >= 0 {
		gid, err := checkID(*c.ProxyGID)
		if err != nil {
			return field("proxyGID", err)
		}
		s.ProxyGID = &gid
	}
	return nil
}

// baseLists checks the port, CIDR and interface lists into s.
func (c Config) baseLists(s *rules.Spec, field func(string, error) error) error {
	var err error
	lists := []struct {
		name string
		v    []string
		dst  *[]rules.PortRange
		star bool
	}{
		{"portsToRedirect", c.InboundPorts, &s.InboundPorts, true},
		{"ignoreInboundPorts", c.IgnoreInbound, &s.IgnoreInbound, false},
		{"ignoreOutboundPorts", c.IgnoreOutbound, &s.IgnoreOutbound, false},
		{"includeOutboundPorts", c.IncludeOutbound, &s.IncludeOutbound, false},
	}
	for _, l := range lists {
		if l.v == nil && l.star {
			continue // nil: every port
		}
		parse := ParsePorts
		if l.star {
			parse = parseStarPorts
		}
		if *l.dst, err = parse(strings.Join(l.v, ",")); err != nil {
			return field(l.name, err)
		}
	}
	if s.SkipSubnets, err = ParseCIDRs(strings.Join(c.SkipSubnets, ",")); err != nil {
		return field("skipSubnets", err)
	}
	if s.SkipOutboundSubnets, err = ParseCIDRs(strings.Join(c.SkipOutboundSubnets, ",")); err != nil {
		return field("skipOutboundSubnets", err)
	}
	if c.IncludeSubnets != nil {
		if s.IncludeSubnets, err = parseStarCIDRs(strings.Join(c.IncludeSubnets, ",")); err != nil {
			return field("includeSubnets", err)
		}
	}
	if s.ExcludeIfaces, err = parseInterfaces(strings.Join(c.ExcludeIfaces, ",")); err != nil {
		return field("excludeInterfaces", err)
	}
	return nil
}

// union appends add to base as a new slice.
func union[T any](base, add []T) []T {
	out := make([]T, 0, len(base)+len(add))
	return append(append(out, base...), add...)
}

// nilIfEmpty keeps "no skip list" as nil for stable output.
func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}
