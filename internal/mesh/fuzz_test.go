package mesh

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/rules"
)

func FuzzParsePorts(f *testing.F) {
	for _, s := range []string{"", "80", "1-65535", "4190,4191", "90-80", "0", "65536", ",", "1,,2", " 8000 - 8100 ", "-", "1-2-3", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ps, err := ParsePorts(s)
		if err != nil {
			if ps != nil {
				t.Fatalf("error with a result: %v", ps)
			}
			return
		}
		for _, p := range ps {
			if p.First == 0 || p.First > p.Last {
				t.Fatalf("%q gave invalid range %v", s, p)
			}
		}
		// Nothing silently dropped: one range per non-blank item.
		if strings.TrimSpace(s) != "" && len(ps) != strings.Count(s, ",")+1 {
			t.Fatalf("%q gave %d ranges", s, len(ps))
		}
	})
}

func FuzzParseCIDRs(f *testing.F) {
	for _, s := range []string{"", "10.0.0.0/8", "fd00::/8,1.2.3.4", "*", "::ffff:1.2.3.4/128", "10.0.0.0/33", "fe80::1%eth0", ",,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ps, err := ParseCIDRs(s)
		if err != nil {
			return
		}
		if strings.TrimSpace(s) != "" && len(ps) != strings.Count(s, ",")+1 {
			t.Fatalf("%q gave %d prefixes", s, len(ps))
		}
		for _, p := range ps {
			if !p.IsValid() || p != p.Masked() {
				t.Fatalf("%q gave %v", s, p)
			}
			// Whatever parses must render and load-able text must not be empty.
			_ = rules.Nft(rules.Generate(rules.Spec{Families: []rules.Family{rules.IPv4, rules.IPv6}, InboundPort: 1, OutboundPort: 2, SkipSubnets: []netip.Prefix{p}}))
		}
	})
}

// FuzzDecide: arbitrary annotations (and labels) must never panic, and a
// meshed decision always carries a Spec that renders.
func FuzzDecide(f *testing.F) {
	keys := []string{LinkerdProxyVersion, LinkerdInject, LinkerdSkipInboundPorts, LinkerdSkipOutboundPorts, LinkerdSkipSubnets, LinkerdProxyUID, LinkerdProxyGID,
		IstioStatus, IstioInject, IstioInterceptionMode, IstioTemplates, IstioProxyConfig, IstioIncludeOutboundRanges, IstioExcludeOutboundRanges,
		IstioIncludeInboundPorts, IstioExcludeInboundPorts, IstioIncludeOutboundPorts, IstioExcludeOutboundPorts, IstioExcludeInterfaces, "example.com/mesh"}
	f.Add(uint8(7), "edge-1", uint8(7), "x", uint8(3), "80,90", false, "k", "v")
	f.Add(uint8(7), istioStatusSidecar, uint8(9), "TPROXY", uint8(12), "10.0.0.0/8,*", true, LinkerdProxyVersion, "x")
	f.Add(uint8(0), "v", uint8(11), "proxyMetadata: {ISTIO_META_DNS_CAPTURE: 'true'}", uint8(4), "1-", false, IstioStatus, "{")
	f.Fuzz(func(t *testing.T, k1 uint8, v1 string, k2 uint8, v2 string, k3 uint8, v3 string, specKnown bool, k4, v4 string) {
		ann := map[string]string{k4: v4} // and one arbitrary pair
		for _, kv := range []struct {
			k uint8
			v string
		}{{k1, v1}, {k2, v2}, {k3, v3}} {
			ann[keys[int(kv.k)%len(keys)]] = kv.v
		}
		pod := Pod{Annotations: ann, Labels: map[string]string{IstioInject: v3, LinkerdControlPlaneLabel: v2}, SpecKnown: specKnown}
		if specKnown {
			pod.Containers = []Container{{Name: "istio-proxy", Args: []string{"proxy", v1}, Env: map[string]string{IstioDNSCaptureEnv: v2}}, {Name: "linkerd-proxy"}}
			pod.InitContainers = []Container{{Name: v3, RestartPolicy: "Always"}}
		}
		meshes := map[string]Config{Linkerd: {TrustAnnotations: ptr(true)}, Istio: {},
			Custom: {Enabled: ptr(true), SelectAnnotation: "example.com/mesh", ProxyUID: ptr(int64(5)), InboundPort: 1, OutboundPort: 2}}
		d, err := Decide(meshes, pod, nil)
		if err != nil {
			return
		}
		if d.Meshed != (d.Spec != nil) {
			t.Fatalf("meshed without spec or spec without meshed: %+v", d)
		}
		if d.Meshed {
			rs := rules.Generate(*d.Spec)
			if rules.Nft(rs) == "" || rules.IptablesRestore(rs, rules.IPv4) == "" {
				t.Fatal("meshed pod renders no rules")
			}
		}
	})
}
