package mesh

import (
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// Bounds FuzzAnnotationsToRules holds a pod to, from the items its
// annotations can hold (annotationItems): every item costs at most
// rulesPerItem rules and allocBytesPerItem bytes beyond a small base. The
// largest pods the caps allow (largestPods) stay well inside: about 2
// rules and 5 KiB per item.
const (
	baseRules         = 128
	rulesPerItem      = 4
	baseAllocBytes    = 1 << 20
	allocBytesPerItem = 8 << 10
)

// FuzzAnnotationsToRules runs the plugin's decision and rule generation,
// annotations to the rules both backends write, on a claimed pod of each
// mesh with up to three annotations built from a repeated item, so values
// reach and pass the caps. Whatever the input, the rules and the bytes
// allocated stay within a bound linear in the pod's items.
func FuzzAnnotationsToRules(f *testing.F) {
	k := func(key string) uint8 { return uint8(slices.Index(HonouredAnnotations, key)) }
	// What the review found, and documents at their caps.
	f.Add(uint8(2), k(KumaExcludeOutForUIDs), "tcp:80:1000", uint16(20000), uint8(1), k(KumaExcludeInbound), "8080", uint16(3), uint8(0), k(KumaGateway), "x", uint16(1), uint8(0))
	f.Add(uint8(1), k(IstioExcludeInterfaces), "e1", uint16(65000), uint8(0), k(IstioProxyConfig), "proxyMetadata: {A: b}", uint16(1), uint8(2), uint8(0), "", uint16(0), uint8(0))
	f.Add(uint8(1), k(IstioProxyConfig), "- a", uint16(60000), uint8(2), k(IstioExcludeOutboundRanges), "10.0.0.0/8", uint16(256), uint8(0), uint8(0), "", uint16(0), uint8(0))
	f.Add(uint8(3), k(ConsulRedirectConfig), `{"ExcludeUIDs":["1"]}`, uint16(1), uint8(0), uint8(0), "", uint16(0), uint8(0), uint8(0), "", uint16(0), uint8(0))
	f.Add(uint8(2), k(KumaConfig), "    - '1000'", uint16(1100), uint8(2), k(KumaExcludeOutbound), "1,2", uint16(255), uint8(0), uint8(0), "", uint16(0), uint8(0))
	meshes := largestMeshes()
	set, err := NewSet(withDefaults(meshes))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, which uint8, k1 uint8, item1 string, n1 uint16, sep1 uint8,
		k2 uint8, item2 string, n2 uint16, sep2 uint8, k3 uint8, item3 string, n3 uint16, sep3 uint8) {
		pod := claimedPod(which)
		for _, a := range []struct {
			k    uint8
			item string
			n    uint16
			sep  uint8
		}{{k1, item1, n1, sep1}, {k2, item2, n2, sep2}, {k3, item3, n3, sep3}} {
			if a.n == 0 || len(a.item)*int(a.n) > 1<<20 {
				continue
			}
			key := HonouredAnnotations[int(a.k)%len(HonouredAnnotations)]
			pod.Annotations[key] = strings.Repeat(a.item+[]string{",", ";", "\n"}[a.sep%3], int(a.n)-1) + a.item
		}
		items := annotationItems(pod.Annotations)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		d, err := set.Decide(pod, []rules.Family{rules.IPv4, rules.IPv6})
		ipt, nft := 0, 0
		if err == nil && d.Meshed {
			ipt, nft = ruleCount(rules.Generate(*d.Spec))
		}
		runtime.ReadMemStats(&after)
		if limit := baseRules + rulesPerItem*items; ipt > limit || nft > limit {
			t.Fatalf("%d iptables and %d nft rules from %d items, more than %d", ipt, nft, items, limit)
		}
		if alloc, limit := after.TotalAlloc-before.TotalAlloc, uint64(baseAllocBytes+allocBytesPerItem*items); alloc > limit {
			t.Fatalf("%d bytes allocated for %d items, more than %d", alloc, items, limit)
		}
	})
}

// claimedPod is a pod the chosen mesh claims from its annotations alone
// (Kuma: with its spec).
func claimedPod(which uint8) Pod {
	switch which % 4 {
	case 0:
		return Pod{Namespace: "ns", Name: "p", Annotations: map[string]string{LinkerdProxyVersion: "v"}}
	case 1:
		return Pod{Namespace: "ns", Name: "p", Annotations: map[string]string{IstioStatus: istioStatusSidecar}}
	case 2:
		return kumaSpecPod(nil, true)
	}
	return Pod{Namespace: "ns", Name: "p", Annotations: map[string]string{ConsulInjectStatus: "injected", ConsulTProxyStatus: "enabled"}}
}

func withDefaults(meshes map[string]Config) map[string]Config {
	out := make(map[string]Config, len(meshes))
	for name, c := range meshes {
		out[name] = c.WithDefaults(name)
	}
	return out
}
