package mesh

import (
	"fmt"
	"slices"
	"strings"

	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// largestPods are the pods with the most rules the caps allow, per mesh:
// every list annotation the mesh reads at MaxListItems (and within
// MaxAnnotationBytes), or a config document at MaxDocumentItems.
func largestPods() map[string]Pod {
	ports := func(from int) string {
		return repeat(MaxListItems, ",", func(i int) string { return fmt.Sprint(from + 2*i) })
	}
	v4 := func(third int) string {
		return repeat(MaxListItems, ",", func(i int) string { return fmt.Sprintf("10.%d.%d.0/24", third, i) })
	}
	mixed := repeat(MaxListItems, ",", func(i int) string {
		if i%2 == 0 {
			return fmt.Sprintf("10.9.%d.0/24", i)
		}
		return fmt.Sprintf("fd00:%x::/64", i)
	})
	ifaces := repeat(MaxListItems, ",", func(i int) string { return fmt.Sprintf("i%d", i) })
	uids := repeat(MaxListItems, ";", func(i int) string { return fmt.Sprint(20000 + 2*i) })
	docUIDs := repeat(MaxDocumentItems-8, "\n", func(i int) string { return fmt.Sprintf("    - '%d'", 20000+2*i) })
	return map[string]Pod{
		"istio": {Namespace: "ns", Name: "istio", Annotations: map[string]string{IstioStatus: `{"containers":["istio-proxy"]}`,
			IstioIncludeInboundPorts: ports(1000), IstioExcludeInboundPorts: ports(1001),
			IstioIncludeOutboundPorts: ports(3000), IstioExcludeOutboundPorts: ports(3001),
			IstioIncludeOutboundRanges: v4(1), IstioExcludeOutboundRanges: mixed, IstioExcludeInterfaces: ifaces}},
		"linkerd": {Namespace: "ns", Name: "linkerd", Annotations: map[string]string{LinkerdProxyVersion: "v",
			LinkerdSkipInboundPorts: ports(1000), LinkerdSkipOutboundPorts: ports(3000), LinkerdSkipSubnets: mixed}},
		"kuma annotations": kumaSpecPod(map[string]string{KumaExcludeInbound: ports(1000), KumaExcludeOutbound: ports(3000),
			KumaExcludeOutForUIDs: uids, KumaExcludeInboundIPs: mixed, KumaExcludeOutIPs: v4(2)}, true),
		"kuma config": kumaSpecPod(map[string]string{KumaConfig: "redirect:\n  outbound:\n    excludePortsForUIDs:\n" + docUIDs}, true),
		"consul": {Namespace: "ns", Name: "consul", Annotations: map[string]string{ConsulInjectStatus: "injected", ConsulTProxyStatus: "enabled",
			ConsulRedirectConfig: `{"ProxyUserID":"5995","ProxyInboundPort":20000,"ProxyOutboundPort":15001,"ExcludeUIDs":[` +
				repeat(MaxDocumentItems-8, ",", func(i int) string { return fmt.Sprintf("%q", fmt.Sprint(20000+i)) }) + `]}`}},
	}
}

// largestMeshes turns on every mesh the largest pods need.
func largestMeshes() map[string]Config {
	return map[string]Config{Linkerd: {TrustAnnotations: ptr(true)}, Istio: {TrustAnnotations: ptr(true)},
		Kuma: {Enabled: ptr(true)}, Consul: {Enabled: ptr(true), TrustAnnotations: ptr(true)}}
}

// ruleCount counts the rules a rule set is written as: iptables-restore
// lines of both families, and nft rules.
func ruleCount(rs rules.RuleSet) (ipt, nft int) {
	for _, f := range rs.Families {
		ipt += strings.Count(rules.IptablesRestore(rs, f), "\n-A ")
	}
	for _, l := range strings.Split(rules.Nft(rs), "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "table") && !strings.HasPrefix(l, "chain") && !strings.HasPrefix(l, "type") && l != "}" && !strings.HasPrefix(l, "#") {
			nft++
		}
	}
	return ipt, nft
}

// annotationItems counts the items a pod's annotations may hold: every
// comma, semicolon and line break starts one more, up to the annotation's
// cap (an annotation over it is refused before it is parsed).
func annotationItems(ann map[string]string) int {
	n := 0
	for k, v := range ann {
		limit := MaxListItems
		if slices.Contains(documentAnnotations, k) {
			limit = MaxDocumentItems
		}
		n += min(limit, 1+strings.Count(v, ",")+strings.Count(v, ";")+strings.Count(v, "\n"))
	}
	return n
}
