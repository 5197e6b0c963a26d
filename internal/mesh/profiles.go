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

// Defaults returns a profile's built-in settings.
func Defaults(name string) (Config, error) {
	switch name {
	case Linkerd:
		return Config{
			Enabled:      ptr(true),
			Sidecar:      "linkerd-proxy",
			ProxyUID:     ptr(int64(2102)),
			InboundPort:  4143,
			OutboundPort: 4140,
			// The proxy's control and admin ports, in that order: the
			// chart reads them as linkerd2-cni's proxyControlPort and
			// proxyAdminPort defaults.
			IgnoreInbound:     []string{"4190", "4191"},
			InterceptionMode:  string(rules.Redirect),
			CaptureDNS:        ptr(false),
			LoopbackToInbound: ptr(false),
			TrustAnnotations:  ptr(false),
		}, nil
	case Istio:
		return Config{
			Enabled:       ptr(true),
			Sidecar:       "istio-proxy",
			ProxyUID:      ptr(int64(1337)),
			ProxyGID:      ptr(int64(1337)),
			InboundPort:   15006,
			OutboundPort:  15001,
			TunnelPort:    15008,
			DNSPort:       15053,
			IgnoreInbound: []string{"15020", "15021", "15090"},
			// Istio's CNI plugin: excludeOutboundPorts defaults to the
			// status port (cni/pkg/plugin/sidecar_redirect.go).
			IgnoreOutbound:    []string{"15020"},
			InterceptionMode:  string(rules.Redirect),
			CaptureDNS:        ptr(false),
			LoopbackToInbound: ptr(true),
			// The proxy's UID (an explicit runAsUser is kept by the
			// injector; OpenShift assigns one) and a mesh-wide DNS
			// capture (proxy env) are in the spec only.
			TrustAnnotations: ptr(false),
		}, nil
	case Kuma:
		// kumahq/kuma internal/config/plugins/runtime/k8s/config.go (sidecar
		// uid/gid 5678, redirect ports 15006/15001, builtin DNS 15053).
		return Config{
			Enabled:          ptr(false),
			Sidecar:          "kuma-sidecar",
			ProxyUID:         ptr(int64(5678)),
			ProxyGID:         ptr(int64(5678)),
			InboundPort:      15006,
			OutboundPort:     15001,
			DNSPort:          15053,
			InterceptionMode: string(rules.Redirect),
			CaptureDNS:       ptr(false),
			// kuma-validation checks the proxy's loopback-to-inbound rule.
			LoopbackToInbound: ptr(true),
			// kuma.io/sidecar-injected is written in init-container mode
			// too: the spec tells the modes apart.
			TrustAnnotations: ptr(false),
		}, nil
	case Consul:
		// hashicorp/consul-k8s connect-inject: consul-dataplane runs as
		// 5995:5995, inbound 20000, outbound 15001, DNS proxy 8600. A pod's
		// own redirect configuration overrides every port and the UID.
		return Config{
			Enabled:           ptr(false),
			Sidecar:           "consul-dataplane",
			ProxyUID:          ptr(int64(5995)),
			ProxyGID:          ptr(int64(5995)),
			InboundPort:       20000,
			OutboundPort:      15001,
			DNSPort:           8600,
			InterceptionMode:  string(rules.Redirect),
			CaptureDNS:        ptr(false),
			LoopbackToInbound: ptr(false),
			// The configuration annotation exists in CNI mode only and
			// carries the UID the injector gave the proxy.
			TrustAnnotations: ptr(true),
		}, nil
	case Custom:
		return Config{
			Enabled:           ptr(false),
			InterceptionMode:  string(rules.Redirect),
			CaptureDNS:        ptr(false),
			LoopbackToInbound: ptr(false),
			TrustAnnotations:  ptr(true),
		}, nil
	}
	return Config{}, fmt.Errorf("unknown mesh profile %q (want one of %s)", name, strings.Join(Profiles, ", "))
}

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
			return s, field(p.name, err)
		}
	}
	if s.InboundPort == s.OutboundPort {
		return s, field("outboundPort", fmt.Errorf("%d is also the inbound port", s.OutboundPort))
	}
	if c.ProxyUID == nil {
		return s, field("proxyUID", errors.New("is required: the proxy's own traffic must not be redirected"))
	}
	if s.ProxyUID, err = checkID(*c.ProxyUID); err != nil {
		return s, field("proxyUID", err)
	}
	if c.ProxyGID != nil && *c.ProxyGID >= 0 {
		gid, err := checkID(*c.ProxyGID)
		if err != nil {
			return s, field("proxyGID", err)
		}
		s.ProxyGID = &gid
	}
	if s.Mode, err = checkMode(c.InterceptionMode); err != nil {
		return s, field("interceptionMode", err)
	}
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
			return s, field(l.name, err)
		}
	}
	if s.SkipSubnets, err = ParseCIDRs(strings.Join(c.SkipSubnets, ",")); err != nil {
		return s, field("skipSubnets", err)
	}
	if s.SkipOutboundSubnets, err = ParseCIDRs(strings.Join(c.SkipOutboundSubnets, ",")); err != nil {
		return s, field("skipOutboundSubnets", err)
	}
	if c.IncludeSubnets != nil {
		if s.IncludeSubnets, err = parseStarCIDRs(strings.Join(c.IncludeSubnets, ",")); err != nil {
			return s, field("includeSubnets", err)
		}
	}
	if s.ExcludeIfaces, err = parseInterfaces(strings.Join(c.ExcludeIfaces, ",")); err != nil {
		return s, field("excludeInterfaces", err)
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
