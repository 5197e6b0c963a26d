package mesh

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/mesh-cni/mesh-cni/internal/rules"
	"sigs.k8s.io/yaml"
)

// Istio's pod contract.
const (
	IstioInit                  = "istio-init"
	IstioStatus                = "sidecar.istio.io/status"
	IstioInject                = "sidecar.istio.io/inject" // label or annotation
	IstioInterceptionMode      = "sidecar.istio.io/interceptionMode"
	IstioTemplates             = "inject.istio.io/templates"
	IstioProxyConfig           = "proxy.istio.io/config"
	IstioIncludeOutboundRanges = "traffic.sidecar.istio.io/includeOutboundIPRanges"
	IstioExcludeOutboundRanges = "traffic.sidecar.istio.io/excludeOutboundIPRanges"
	IstioIncludeInboundPorts   = "traffic.sidecar.istio.io/includeInboundPorts"
	IstioExcludeInboundPorts   = "traffic.sidecar.istio.io/excludeInboundPorts"
	IstioIncludeOutboundPorts  = "traffic.sidecar.istio.io/includeOutboundPorts"
	IstioExcludeOutboundPorts  = "traffic.sidecar.istio.io/excludeOutboundPorts"
	IstioExcludeInterfaces     = "traffic.sidecar.istio.io/excludeInterfaces"
	IstioDNSCaptureEnv         = "ISTIO_META_DNS_CAPTURE"
	IstioDisableEnvoyEnv       = "DISABLE_ENVOY"
)

// istioStatus is the injector's record of what it injected.
type istioStatus struct {
	InitContainers []string `json:"initContainers"`
	Containers     []string `json:"containers"`
}

// judgeIstio follows Istio's plugin: the pod needs the injector's status
// annotation and an istio-proxy; istio-init means init-container mode (the
// pod redirects itself); inject=false (label over annotation), a disabled
// or gateway proxy, and interceptionMode NONE skip the pod. The status
// annotation lists the injected containers, so annotations decide alone,
// except for gateway templates, where only the proxy's args tell.
func judgeIstio(cfg Config, base rules.Spec, pod Pod) (judgement, error) {
	ann := pod.Annotations
	raw, hasStatus := ann[IstioStatus]
	var proxy *Container
	if pod.SpecKnown {
		proxy = sidecar(pod, cfg.Sidecar)
		switch {
		case proxy == nil && !hasStatus:
			return judgement{v: notMine}, nil
		case hasInit(pod, IstioInit):
			return judgement{v: skipped, reason: ReasonInitContainerMode}, nil
		case proxy == nil:
			return judgement{v: skipped, reason: ReasonNoSidecar}, nil
		case !hasStatus:
			return judgement{v: skipped, reason: ReasonNotInjected}, nil
		case isTrue(proxy.Env[IstioDisableEnvoyEnv]):
			return judgement{v: skipped, reason: ReasonProxyDisabled}, nil
		case !sidecarArgs(proxy.Args):
			return judgement{v: skipped, reason: ReasonNotSidecar}, nil
		}
	} else {
		if !hasStatus {
			return judgement{v: notMine}, nil
		}
		var st istioStatus
		if err := json.Unmarshal([]byte(raw), &st); err != nil {
			return judgement{v: needSpec}, nil //nolint:nilerr // an unreadable status: the spec is the truth
		}
		if slices.Contains(st.InitContainers, IstioInit) {
			return judgement{v: skipped, reason: ReasonInitContainerMode}, nil
		}
		if !slices.Contains(st.Containers, cfg.Sidecar) && !slices.Contains(st.InitContainers, cfg.Sidecar) {
			return judgement{v: skipped, reason: ReasonNoSidecar}, nil
		}
		if t, ok := ann[IstioTemplates]; ok && t != "sidecar" {
			return judgement{v: needSpec}, nil
		}
	}
	if injectFalse(pod) {
		return judgement{v: skipped, reason: ReasonInjectDisabled}, nil
	}
	if strings.EqualFold(ann[IstioInterceptionMode], "NONE") {
		return judgement{v: skipped, reason: ReasonInterceptionNone}, nil
	}
	if !pod.SpecKnown && !trusted(cfg) {
		return judgement{v: needSpec}, nil
	}
	s, err := istioSpec(cfg, base, pod, proxy)
	if err != nil {
		return judgement{}, err
	}
	return meshedAs(s, pod, proxy)
}

// sidecarArgs: istio-proxy runs "proxy sidecar"; "proxy router" is a
// gateway. No args (a custom image) counts as a sidecar.
func sidecarArgs(args []string) bool {
	for i, a := range args {
		if a == "proxy" && i+1 < len(args) {
			return args[i+1] == "sidecar"
		}
	}
	return true
}

func isTrue(s string) bool {
	b, err := strconv.ParseBool(s)
	return err == nil && b
}

// injectFalse: the label wins over the annotation; a value that is not a
// boolean does not opt out (Istio's reading).
func injectFalse(pod Pod) bool {
	v, ok := pod.Labels[IstioInject]
	if !ok {
		v, ok = pod.Annotations[IstioInject]
	}
	if !ok {
		return false
	}
	b, err := strconv.ParseBool(v)
	return err == nil && !b
}

// istioSpec applies the traffic.sidecar.istio.io annotations as Istio's
// plugin does: include lists replace the configured ones ("*" = all, "" =
// none), excludeInboundPorts adds to the proxy's own ports, and
// excludeOutboundIPRanges skips destinations only.
func istioSpec(cfg Config, s rules.Spec, pod Pod, proxy *Container) (rules.Spec, error) {
	ann := pod.Annotations
	if v, ok := ann[IstioInterceptionMode]; ok {
		switch m := rules.Mode(strings.ToUpper(strings.TrimSpace(v))); m {
		case rules.Redirect, rules.TProxy:
			s.Mode = m
		default:
			return s, annErr(IstioInterceptionMode, v, fmt.Errorf("must be REDIRECT, TPROXY or NONE"))
		}
	}
	var err error
	ports := []struct {
		key   string
		dst   *[]rules.PortRange
		star  bool
		union bool
	}{
		{IstioIncludeInboundPorts, &s.InboundPorts, true, false},
		{IstioExcludeInboundPorts, &s.IgnoreInbound, false, true},
		{IstioIncludeOutboundPorts, &s.IncludeOutbound, false, false},
		{IstioExcludeOutboundPorts, &s.IgnoreOutbound, false, false},
	}
	for _, p := range ports {
		v, ok := ann[p.key]
		if !ok {
			continue
		}
		parse := ParsePorts
		if p.star {
			parse = parseStarPorts
		}
		got, err := parse(v)
		if err != nil {
			return s, annErr(p.key, v, err)
		}
		if p.union {
			got = union(*p.dst, got)
		}
		*p.dst = got
	}
	if v, ok := ann[IstioIncludeOutboundRanges]; ok {
		if s.IncludeSubnets, err = parseStarCIDRs(v); err != nil {
			return s, annErr(IstioIncludeOutboundRanges, v, err)
		}
	}
	if v, ok := ann[IstioExcludeOutboundRanges]; ok {
		if s.SkipOutboundSubnets, err = ParseCIDRs(v); err != nil {
			return s, annErr(IstioExcludeOutboundRanges, v, err)
		}
	}
	if v, ok := ann[IstioExcludeInterfaces]; ok {
		ifs, err := parseInterfaces(v)
		if err != nil {
			return s, annErr(IstioExcludeInterfaces, v, err)
		}
		s.ExcludeIfaces = union(s.ExcludeIfaces, ifs)
	}
	if s.CaptureDNS, err = istioDNSCapture(s.CaptureDNS, pod, proxy); err != nil {
		return s, err
	}
	if s.CaptureDNS && s.DNSPort == 0 {
		return s, fmt.Errorf("DNS capture asked for, but meshes.%s.dnsPort is not set", s.Mesh)
	}
	s.IgnoreOutbound = nilIfEmpty(s.IgnoreOutbound)
	s.IncludeOutbound = nilIfEmpty(s.IncludeOutbound)
	s.SkipOutboundSubnets = nilIfEmpty(s.SkipOutboundSubnets)
	// excludeOutboundPorts: TCP and UDP, before DNS capture (istio.io/istio
	// tools/istio-iptables/pkg/capture/run.go:282-288).
	s.IgnoreOutboundFirst = true
	return s, nil
}

// istioDNSCapture: the proxy's ISTIO_META_DNS_CAPTURE env (spec known) wins,
// then proxyMetadata in the proxy.istio.io/config annotation, then the
// plugin config (which is where a mesh-wide default belongs).
func istioDNSCapture(def bool, pod Pod, proxy *Container) (bool, error) {
	if proxy != nil {
		if v, ok := proxy.Env[IstioDNSCaptureEnv]; ok {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return false, fmt.Errorf("container %s env %s=%q: not a boolean", proxy.Name, IstioDNSCaptureEnv, v)
			}
			return b, nil
		}
	}
	raw, ok := pod.Annotations[IstioProxyConfig]
	if !ok {
		return def, nil
	}
	var pc struct {
		ProxyMetadata map[string]string `json:"proxyMetadata"`
	}
	if err := yaml.Unmarshal([]byte(raw), &pc); err != nil {
		return false, annErr(IstioProxyConfig, raw, fmt.Errorf("not valid YAML: %w", err))
	}
	v, ok := pc.ProxyMetadata[IstioDNSCaptureEnv]
	if !ok {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, annErr(IstioProxyConfig, raw, fmt.Errorf("proxyMetadata.%s=%q is not a boolean", IstioDNSCaptureEnv, v))
	}
	return b, nil
}
