package mesh

import (
	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// Linkerd's pod contract.
const (
	LinkerdInit               = "linkerd-init"
	LinkerdProxyVersion       = "linkerd.io/proxy-version"
	LinkerdInject             = "linkerd.io/inject"
	LinkerdSkipInboundPorts   = "config.linkerd.io/skip-inbound-ports"
	LinkerdSkipOutboundPorts  = "config.linkerd.io/skip-outbound-ports"
	LinkerdSkipSubnets        = "config.linkerd.io/skip-subnets"
	LinkerdProxyUID           = "config.linkerd.io/proxy-uid"
	LinkerdProxyGID           = "config.linkerd.io/proxy-gid"
	LinkerdControlPlaneLabel  = "linkerd.io/control-plane-component"
	linkerdKubeAPIPortsToSkip = "443,6443"
)

// judgeLinkerd: a pod is meshed when linkerd-proxy runs in it (as a
// container or native sidecar) and no linkerd-init init container does the
// redirect itself. The injector's linkerd.io/proxy-version annotation says a
// proxy was injected but not in which mode, so from annotations alone it is
// not conclusive unless trustAnnotations is set.
func judgeLinkerd(cfg Config, base rules.Spec, pod Pod) (judgement, error) {
	ann := pod.Annotations
	if ann[LinkerdInject] == "disabled" {
		return judgement{v: skipped, reason: ReasonInjectDisabled}, nil
	}
	var proxy *Container
	if pod.SpecKnown {
		if proxy = sidecar(pod, cfg.Sidecar); proxy == nil {
			return judgement{v: notMine}, nil
		}
		if hasInit(pod, LinkerdInit) {
			return judgement{v: skipped, reason: ReasonInitContainerMode}, nil
		}
	} else {
		if _, ok := ann[LinkerdProxyVersion]; !ok {
			return judgement{v: notMine}, nil
		}
		if !trusted(cfg) {
			return judgement{v: needSpec}, nil
		}
	}
	s, err := linkerdSpec(base, pod)
	if err != nil {
		return judgement{}, err
	}
	return meshedAs(s, pod, proxy)
}

// linkerdSpec applies the pod's annotations: skip-inbound-ports adds to the
// configured list (the proxy's own ports stay skipped), skip-outbound-ports
// and skip-subnets replace theirs, as Linkerd's plugin does. An empty value
// is no override, as in Linkerd's plugin (linkerd2-proxy-init
// cni-plugin/main.go, getAnnotationOverride).
func linkerdSpec(s rules.Spec, pod Pod) (rules.Spec, error) {
	ann := make(map[string]string, len(pod.Annotations))
	for k, v := range pod.Annotations {
		if v != "" {
			ann[k] = v
		}
	}
	if v, ok := ann[LinkerdSkipInboundPorts]; ok {
		p, err := ParsePorts(v)
		if err != nil {
			return s, annErr(LinkerdSkipInboundPorts, v, err)
		}
		s.IgnoreInbound = union(s.IgnoreInbound, p)
	}
	if v, ok := ann[LinkerdSkipOutboundPorts]; ok {
		p, err := ParsePorts(v)
		if err != nil {
			return s, annErr(LinkerdSkipOutboundPorts, v, err)
		}
		s.IgnoreOutbound = p
	}
	if pod.Labels[LinkerdControlPlaneLabel] != "" {
		// The control plane must reach the API server before its proxies
		// have identities; Linkerd's plugin skips the API ports for it.
		p, _ := ParsePorts(linkerdKubeAPIPortsToSkip)
		s.IgnoreOutbound = union(s.IgnoreOutbound, p)
	}
	if v, ok := ann[LinkerdSkipSubnets]; ok {
		p, err := ParseCIDRs(v)
		if err != nil {
			return s, annErr(LinkerdSkipSubnets, v, err)
		}
		s.SkipSubnets = p
	}
	if v, ok := ann[LinkerdProxyUID]; ok {
		id, err := parseID(v)
		if err != nil {
			return s, annErr(LinkerdProxyUID, v, err)
		}
		s.ProxyUID = id
	}
	if v, ok := ann[LinkerdProxyGID]; ok {
		if v == "-1" { // Linkerd's "unset"
			s.ProxyGID = nil
		} else {
			id, err := parseID(v)
			if err != nil {
				return s, annErr(LinkerdProxyGID, v, err)
			}
			s.ProxyGID = &id
		}
	}
	s.IgnoreOutbound = nilIfEmpty(s.IgnoreOutbound)
	s.SkipSubnets = nilIfEmpty(s.SkipSubnets)
	return s, nil
}
