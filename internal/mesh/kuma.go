package mesh

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// Kuma's pod contract (kumahq/kuma v2.14.3 and master; internal/mesh/README.md).
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
	KumaDropInvalid       = "traffic.kuma.io/drop-invalid-packets"
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
	// Kuma's inbound passthrough (and kuma-validation) source IPv6 from
	// ::6, which kuma-cni adds to lo whenever it redirects IPv6
	// (kumahq/kuma v2.14.3 pkg/transparentproxy/config/config.go:885,
	// utils.go:247-270). Generate keeps it only when IPv6 is redirected.
	s.LoopbackAddrs = []netip.Prefix{kumaPassthrough6}
	return meshedAs(s, pod, proxy)
}

var kumaPassthrough6 = netip.MustParsePrefix("::6/128")

// KumaFamilies is how kuma-cni picks a pod's families: IPv4 always, IPv6
// whenever the pod's netns has any non-loopback IPv6 address, link-local
// included (kumahq/kuma v2.14.3 pkg/transparentproxy/config/config.go:854-916,
// HasLocalIPv6 in utils.go:217-232). A pod whose eth0 holds only fe80::
// still gets IPv6 rules, and kuma-validation checks them.
func KumaFamilies(addrs []netip.Addr) []rules.Family {
	fams := []rules.Family{rules.IPv4}
	for _, a := range addrs {
		if a.Is6() && !a.Is4In6() && !a.IsLoopback() {
			return append(fams, rules.IPv6)
		}
	}
	return fams
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

// kumaLegacySpec reads kuma-cni's per-field annotations, in kuma-cni's
// order, so the first error is the one it reports.
func kumaLegacySpec(s rules.Spec, ann map[string]string) (rules.Spec, bool, error) {
	a := kumaAnn(ann)
	if err := a.proxy(&s); err != nil {
		return s, false, err
	}
	gateway, err := kumaFlag(ann, KumaGateway)
	if err != nil {
		return s, false, err
	}
	if err := a.inbound(&s, gateway); err != nil {
		return s, false, err
	}
	if err := a.outbound(&s); err != nil {
		return s, false, err
	}
	return s, !gateway, nil
}

// kumaAnn is a pod's annotations as kuma-cni's per-field reader sees them.
type kumaAnn map[string]string

// get is the annotation, or def when the pod has none.
func (ann kumaAnn) get(key, def string) string {
	if v, ok := ann[key]; ok {
		return v
	}
	return def
}

// proxy reads the proxy's ports, UID and the IP family mode.
func (ann kumaAnn) proxy(s *rules.Spec) error {
	var err error
	for _, id := range []struct {
		key string
		dst *uint16
	}{{KumaInboundPort, &s.InboundPort}, {KumaOutboundPort, &s.OutboundPort}, {KumaBuiltinDNSPort, &s.DNSPort}} {
		if v, ok := ann[id.key]; ok {
			if *id.dst, err = parsePort(v); err != nil {
				return annErr(id.key, v, err)
			}
		}
	}
	if v, ok := ann[KumaSidecarUID]; ok {
		if s.ProxyUID, err = parseID(v); err != nil {
			return annErr(KumaSidecarUID, v, err)
		}
	}
	if v, ok := ann[KumaIPFamilyMode]; ok {
		// kuma-cni refuses an empty mode here (annotations_linux.go:175-178).
		if err := kumaFamilyMode(v); err != nil || v == "" {
			return annErr(KumaIPFamilyMode, v, fmt.Errorf("want dualstack or ipv4"))
		}
	}
	return nil
}

// inbound reads the inbound exclusions (none for a gateway, whose inbound
// is not redirected).
func (ann kumaAnn) inbound(s *rules.Spec, gateway bool) error {
	var err error
	// kuma-cni reads the inbound exclusions only when inbound is
	// redirected, the probe proxy's port appended (injector_linux.go:128-139,
	// annotations_linux.go:249-261); an empty result fails its ADD.
	inExclude := ann.get(KumaExcludeInbound, kumaLegacyExclude)
	probe := ann.get(KumaProbeProxyPort, kumaLegacyProbePort)
	if probe != "0" {
		if _, err := kumaLegacyPortList(probe); err != nil || strings.Contains(probe, ",") {
			return annErr(KumaProbeProxyPort, probe, fmt.Errorf("want one port from 1 to %d, or 0 for none", MaxPort))
		}
		if strings.TrimSpace(inExclude) == "" {
			inExclude = probe
		} else {
			inExclude += "," + probe
		}
	}
	if v, ok := ann[KumaExcludeInbound]; ok && gateway {
		// Checked anyway, as kuma-cni checks every annotation it knows
		// (annotations_linux.go:188-202, validatePortList).
		if _, err := kumaLegacyPortList(strings.ReplaceAll(v, " ", "")); err != nil && strings.TrimSpace(v) != "" {
			return annErr(KumaExcludeInbound, v, err)
		}
	}
	if !gateway {
		if s.IgnoreInbound, err = kumaLegacyPortList(inExclude); err != nil {
			key, v := KumaExcludeInbound, ann.get(KumaExcludeInbound, kumaLegacyExclude)
			if strings.TrimSpace(v) == "" && probe == "0" {
				err = fmt.Errorf("%w (with %s \"0\" nothing is left)", err, KumaProbeProxyPort)
			}
			return annErr(key, v, err)
		}
	}
	return nil
}

// outbound reads the outbound exclusions, the exempt UIDs and IPs, DNS
// capture and the drop of invalid packets.
func (ann kumaAnn) outbound(s *rules.Spec) error {
	var err error
	out := ann.get(KumaExcludeOutbound, kumaLegacyExclude)
	if s.IgnoreOutbound, err = kumaLegacyPortList(out); err != nil {
		return annErr(KumaExcludeOutbound, out, err)
	}
	if v, ok := ann[KumaExcludeOutForUIDs]; ok {
		if s.ExemptUIDs, err = kumaUIDExclusions(strings.Split(v, ";")); err != nil {
			return annErr(KumaExcludeOutForUIDs, v, err)
		}
	}
	for _, l := range []struct {
		key string
		dst *[]netip.Prefix
	}{{KumaExcludeInboundIPs, &s.SkipInboundSources}, {KumaExcludeOutIPs, &s.SkipOutboundSubnets}} {
		v, ok := ann[l.key]
		if !ok {
			continue
		}
		if strings.TrimSpace(v) == "" { // annotations_linux.go:125-130
			return annErr(l.key, v, fmt.Errorf("IPs cannot be empty"))
		}
		if *l.dst, err = ParseCIDRs(v); err != nil {
			return annErr(l.key, v, err)
		}
	}
	if s.CaptureDNS, err = kumaFlag(ann, KumaBuiltinDNS); err != nil {
		return err
	}
	if s.DropInvalid, err = kumaFlag(ann, KumaDropInvalid); err != nil {
		return err
	}
	return nil
}

// kumaLegacyPortList reads kuma-cni's per-field port lists: plain ports
// joined by commas, no blanks, no ranges, not empty (kuma-cni parses each
// item with strconv.ParseUint untrimmed: injector_linux.go:19-41). Port 0,
// which kuma-cni lets through, is refused as everywhere here.
func kumaLegacyPortList(v string) ([]rules.PortRange, error) {
	if v == "" {
		return nil, fmt.Errorf("empty port list (kuma-cni fails on it; omit the annotation for the default)")
	}
	var out []rules.PortRange
	for _, item := range strings.Split(v, ",") {
		n, err := strconv.ParseUint(item, 10, 16)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("invalid port %q: want a number from 1 to %d, comma-separated, no blanks or ranges", item, MaxPort)
		}
		out = append(out, rules.PortRange{First: uint16(n), Last: uint16(n)})
	}
	return out, nil
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
// family left out would bypass the proxy (internal/mesh/README.md).
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
