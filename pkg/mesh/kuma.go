package mesh

import (
	"fmt"
	"strings"

	"github.com/mesh-cni/mesh-cni/pkg/rules"
)

// Kuma's pod contract (kumahq/kuma v2.14.3 and master; pkg/mesh/README.md).
const (
	KumaInit              = "kuma-init"
	KumaSidecarInjected   = "kuma.io/sidecar-injected"
	KumaConfig            = "traffic.kuma.io/transparent-proxy-config"
	KumaSidecarUID        = "kuma.io/sidecar-uid"
	KumaInboundPort       = "kuma.io/transparent-proxying-inbound-port"
	KumaOutboundPort      = "kuma.io/transparent-proxying-outbound-port"
	KumaIPFamilyMode      = "kuma.io/transparent-proxying-ip-family-mode"
	KumaExcludeInbound    = "traffic.kuma.io/exclude-inbound-ports"
	KumaExcludeOutbound   = "traffic.kuma.io/exclude-outbound-ports"
	KumaExcludeOutForUIDs = "traffic.kuma.io/exclude-outbound-ports-for-uids"
	KumaExcludeInboundIPs = "traffic.kuma.io/exclude-inbound-ips"
	KumaExcludeOutIPs     = "traffic.kuma.io/exclude-outbound-ips"
	KumaProbeProxyPort    = "kuma.io/application-probe-proxy-port"
	KumaGateway           = "kuma.io/gateway"
	KumaBuiltinDNS        = "kuma.io/builtin-dns"
	KumaBuiltinDNSPort    = "kuma.io/builtin-dns-port"
	// kuma-cni's defaults for pods without the config annotation: the
	// proxy's admin port both ways, the probe proxy's port inbound.
	kumaLegacyExclude   = "9901"
	kumaLegacyProbePort = "9001"
)

// judgeKuma follows kuma-cni: kuma.io/sidecar-injected "true", a
// kuma-sidecar container (or native sidecar), and no kuma-init init
// container (which redirects the pod itself). The annotation is written in
// both modes, so without trustAnnotations the spec confirms the mode.
func judgeKuma(cfg Config, base rules.Spec, pod Pod) (judgement, error) {
	if pod.Annotations[KumaSidecarInjected] != "true" {
		return judgement{v: notMine}, nil
	}
	var proxy *Container
	switch {
	case pod.SpecKnown && hasInit(pod, KumaInit):
		return judgement{v: skipped, reason: ReasonInitContainerMode}, nil
	case pod.SpecKnown:
		if proxy = sidecar(pod, cfg.Sidecar); proxy == nil {
			return judgement{v: skipped, reason: ReasonNoSidecar}, nil
		}
	case !trusted(cfg):
		return judgement{v: needSpec}, nil
	}
	s, inbound, err := kumaSpec(base, pod.Annotations)
	if err != nil {
		return judgement{}, err
	}
	if !inbound {
		s.InboundPorts = []rules.PortRange{} // a gateway: no inbound redirect
	}
	s.DNSUDPOnly, s.ExemptDNS = true, true
	note, err := proxyIdentity(&s, pod, proxy)
	if err != nil {
		return judgement{}, err
	}
	return judgement{v: meshed, spec: s, note: note}, nil
}

// kumaSpec reads the injector's config annotation, or kuma-cni's older
// per-field annotations when it is absent. It says whether inbound
// traffic is redirected (not for a gateway).
func kumaSpec(s rules.Spec, ann map[string]string) (rules.Spec, bool, error) {
	if raw := ann[KumaConfig]; raw != "" {
		return kumaConfigSpec(s, raw)
	}
	return kumaLegacySpec(s, ann)
}

func kumaLegacySpec(s rules.Spec, ann map[string]string) (rules.Spec, bool, error) {
	get := func(key, def string) string {
		if v, ok := ann[key]; ok {
			return v
		}
		return def
	}
	var err error
	for _, id := range []struct {
		key string
		dst *uint16
	}{{KumaInboundPort, &s.InboundPort}, {KumaOutboundPort, &s.OutboundPort}, {KumaBuiltinDNSPort, &s.DNSPort}} {
		if v, ok := ann[id.key]; ok {
			if *id.dst, err = parsePort(v); err != nil {
				return s, false, annErr(id.key, v, err)
			}
		}
	}
	if v, ok := ann[KumaSidecarUID]; ok {
		if s.ProxyUID, err = parseID(v); err != nil {
			return s, false, annErr(KumaSidecarUID, v, err)
		}
	}
	if v, ok := ann[KumaIPFamilyMode]; ok {
		if err := kumaFamilyMode(v); err != nil {
			return s, false, annErr(KumaIPFamilyMode, v, err)
		}
	}
	ports := []struct {
		key, def string
		dst      *[]rules.PortRange
	}{{KumaExcludeInbound, kumaLegacyExclude, &s.IgnoreInbound}, {KumaExcludeOutbound, kumaLegacyExclude, &s.IgnoreOutbound}}
	for _, p := range ports {
		v := get(p.key, p.def)
		if *p.dst, err = ParsePorts(v); err != nil {
			return s, false, annErr(p.key, v, err)
		}
	}
	if v := get(KumaProbeProxyPort, kumaLegacyProbePort); v != "0" {
		p, err := parsePort(v)
		if err != nil {
			return s, false, annErr(KumaProbeProxyPort, v, err)
		}
		s.IgnoreInbound = append(s.IgnoreInbound, rules.PortRange{First: p, Last: p})
	}
	if v, ok := ann[KumaExcludeOutForUIDs]; ok {
		if s.ExemptUIDs, err = kumaUIDExclusions(strings.Split(v, ";")); err != nil {
			return s, false, annErr(KumaExcludeOutForUIDs, v, err)
		}
	}
	if v, ok := ann[KumaExcludeInboundIPs]; ok {
		if s.SkipInboundSources, err = ParseCIDRs(v); err != nil {
			return s, false, annErr(KumaExcludeInboundIPs, v, err)
		}
	}
	if v, ok := ann[KumaExcludeOutIPs]; ok {
		if s.SkipOutboundSubnets, err = ParseCIDRs(v); err != nil {
			return s, false, annErr(KumaExcludeOutIPs, v, err)
		}
	}
	gateway, err := kumaFlag(ann, KumaGateway)
	if err != nil {
		return s, false, err
	}
	if s.CaptureDNS, err = kumaFlag(ann, KumaBuiltinDNS); err != nil {
		return s, false, err
	}
	return s, !gateway, nil
}

// kumaFlag reads enabled/disabled/true/false (any case), as kuma-cni does.
func kumaFlag(ann map[string]string, key string) (bool, error) {
	v, ok := ann[key]
	if !ok {
		return false, nil
	}
	switch strings.ToLower(v) {
	case "enabled", "true":
		return true, nil
	case "disabled", "false":
		return false, nil
	}
	return false, annErr(key, v, fmt.Errorf("want enabled, disabled, true or false"))
}

// kumaFamilyMode accepts Kuma's modes. IPv6 is redirected in either: a
// family left out would bypass the proxy (pkg/mesh/README.md).
func kumaFamilyMode(v string) error {
	switch v {
	case "", "dualstack", "ipv4":
		return nil
	}
	return fmt.Errorf("want dualstack or ipv4")
}

// kumaUIDExclusions reads excludePortsForUIDs entries,
// "[proto[,proto]:][ports:]uid-or-range" (Kuma's
// pkg/transparentproxy/config/utils.go parseExcludePortsForUIDs).
func kumaUIDExclusions(entries []string) ([]rules.UIDExemption, error) {
	var out []rules.UIDExemption
	for _, e := range entries {
		if strings.TrimSpace(e) == "" {
			continue
		}
		parts := strings.Split(e, ":")
		protos, ports, uids := "*", "*", parts[len(parts)-1]
		switch len(parts) {
		case 2:
			ports = parts[0]
		case 3:
			protos, ports = parts[0], parts[1]
		case 1:
		default:
			return nil, fmt.Errorf("entry %q: want [protocol:][ports:]uids", e)
		}
		first, last, err := uidRange(uids)
		if err != nil {
			return nil, fmt.Errorf("entry %q: %w", e, err)
		}
		var pr []rules.PortRange
		if p := strings.TrimSpace(ports); p != "*" && p != "" {
			if pr, err = ParsePorts(p); err != nil {
				return nil, fmt.Errorf("entry %q: %w", e, err)
			}
		}
		ex := rules.UIDExemption{First: first, Last: last, Ports: pr}
		switch strings.ToLower(strings.ReplaceAll(protos, " ", "")) {
		case "", "*", "tcp,udp", "udp,tcp":
			out = append(out, ex)
		case "tcp", "udp":
			ex.Proto = rules.Proto(strings.ToLower(strings.TrimSpace(protos)))
			out = append(out, ex)
		default:
			return nil, fmt.Errorf("entry %q: protocol %q: want tcp, udp or *", e, protos)
		}
	}
	return out, nil
}

// uidRange reads "1000" or "1000-2000".
func uidRange(v string) (uint32, uint32, error) {
	lo, hi, isRange := strings.Cut(strings.TrimSpace(v), "-")
	first, err := parseID(lo)
	if err != nil {
		return 0, 0, fmt.Errorf("uid %q: %w", v, err)
	}
	if !isRange {
		return first, first, nil
	}
	last, err := parseID(hi)
	if err != nil || last < first {
		return 0, 0, fmt.Errorf("uid range %q: want first-last with first <= last", v)
	}
	return first, last, nil
}
