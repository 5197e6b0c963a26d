package mesh

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// repeat joins n items made by item(i) with sep.
func repeat(n int, sep string, item func(i int) string) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = item(i)
	}
	return strings.Join(parts, sep)
}

// TestAnnotationLimits: annotations over the caps fail before they are
// parsed, naming the annotation; at the caps they are accepted.
func TestAnnotationLimits(t *testing.T) {
	all := map[string]Config{Linkerd: {TrustAnnotations: ptr(true)}, Istio: {TrustAnnotations: ptr(true)},
		Kuma: {Enabled: ptr(true)}, Consul: {Enabled: ptr(true)}}
	uids := func(n int) string {
		return repeat(n, ";", func(i int) string { return fmt.Sprintf("tcp:%d:%d", 1000+i%60000, 20000+i) })
	}
	istio := func(k, v string) Pod {
		return Pod{Annotations: map[string]string{IstioStatus: istioStatusSidecar, k: v}}
	}
	kuma := func(k, v string) Pod { return kumaSpecPod(map[string]string{k: v}, true) }
	cases := []struct {
		name string
		pod  Pod
		key  string // the annotation the error must name; "" = accepted
	}{
		// What the review found: 250 KB of Kuma UID exclusions, 65k
		// interfaces, 182 KB of ProxyConfig YAML.
		{"kuma uid exclusions 250 KB", kuma(KumaExcludeOutForUIDs, uids(14000)), KumaExcludeOutForUIDs},
		{"istio interfaces 65k", istio(IstioExcludeInterfaces, repeat(65000, ",", func(i int) string { return fmt.Sprintf("e%d", i) })), IstioExcludeInterfaces},
		{"istio proxy config 182 KB", istio(IstioProxyConfig, "proxyMetadata:\n"+repeat(20000, "\n", func(i int) string { return fmt.Sprintf("  K%d: v", i) })), IstioProxyConfig},
		{"kuma config over the document cap", kuma(KumaConfig, strings.Repeat(" ", MaxDocumentBytes+1)), KumaConfig},
		{"consul config over the document cap", Pod{Annotations: map[string]string{ConsulInjectStatus: "injected", ConsulTProxyStatus: "enabled",
			ConsulRedirectConfig: `{"ProxyUserID":"5995",` + strings.Repeat(" ", MaxDocumentBytes) + `}`}}, ConsulRedirectConfig},
		{"linkerd ports: one item too many", Pod{Annotations: map[string]string{LinkerdProxyVersion: "v",
			LinkerdSkipOutboundPorts: repeat(MaxListItems+1, ",", func(i int) string { return fmt.Sprint(1 + i) })}}, LinkerdSkipOutboundPorts},
		{"consul config with too many UIDs", Pod{Annotations: map[string]string{ConsulInjectStatus: "injected", ConsulTProxyStatus: "enabled",
			ConsulRedirectConfig: `{"ProxyUserID":"5995","ExcludeUIDs":[` + repeat(MaxDocumentItems, ",", func(i int) string { return fmt.Sprintf("%q", fmt.Sprint(i)) }) + `]}`}}, ConsulRedirectConfig},
		{"kuma config with too many lines", kuma(KumaConfig, "redirect:\n  outbound:\n    excludePortsForUIDs:\n"+repeat(MaxDocumentItems, "\n", func(i int) string { return fmt.Sprintf("    - '%d'", i) })), KumaConfig},
		{"list bytes over the cap", istio(IstioExcludeOutboundRanges, strings.Repeat(" ", MaxAnnotationBytes)+"10.0.0.0/8"), IstioExcludeOutboundRanges},
		// At the caps.
		{"linkerd ports at the cap", Pod{Annotations: map[string]string{LinkerdProxyVersion: "v",
			LinkerdSkipOutboundPorts: repeat(MaxListItems, ",", func(i int) string { return fmt.Sprint(1 + i) })}}, ""},
		{"kuma uid exclusions at the cap", kuma(KumaExcludeOutForUIDs, uids(MaxListItems)), ""},
		// A mesh that is off does not read its annotations.
		{"annotation of a disabled mesh", Pod{Annotations: map[string]string{LinkerdProxyVersion: "v", KumaExcludeOutForUIDs: uids(14000)}}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			meshes := all
			if strings.Contains(tc.name, "disabled") {
				meshes = map[string]Config{Linkerd: {TrustAnnotations: ptr(true)}}
			}
			d, err := Decide(meshes, tc.pod, nil)
			if tc.key == "" {
				if err != nil || !d.Meshed {
					t.Fatalf("want meshed, got %+v, %v", d, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "annotation "+tc.key+"=") || d.Reason != ReasonInvalidAnnotation {
				t.Fatalf("want an error naming %s, got %+v, %v", tc.key, d, err)
			}
			if len(err.Error()) > 2048 {
				t.Errorf("error of %d bytes: the value must be cut", len(err.Error()))
			}
		})
	}
}

// TestSettingListLimit: a chain entry's list is capped the same way.
func TestSettingListLimit(t *testing.T) {
	c := Config{IgnoreOutbound: []string{repeat(MaxListItems+1, ",", func(i int) string { return fmt.Sprint(1 + i) })}}.WithDefaults(Linkerd)
	if _, err := NewSet(map[string]Config{Linkerd: c}); err == nil || !strings.Contains(err.Error(), "more than the 256") {
		t.Fatalf("want the list cap, got %v", err)
	}
}

// TestLargestPods: the largest pods the caps allow are accepted and stay
// inside the fuzz target's bounds.
func TestLargestPods(t *testing.T) {
	for name, p := range largestPods() {
		d, err := Decide(largestMeshes(), p, nil)
		if err != nil || !d.Meshed {
			t.Fatalf("%s: want meshed, got %+v, %v", name, d, err)
		}
		ipt, nft := ruleCount(rules.Generate(*d.Spec))
		items := annotationItems(p.Annotations)
		if limit := baseRules + rulesPerItem*items; ipt > limit || nft > limit {
			t.Errorf("%s: %d iptables and %d nft rules from %d items, more than %d", name, ipt, nft, items, limit)
		}
		t.Logf("%s: %d items, %d iptables rules, %d nft rules", name, items, ipt, nft)
	}
}
