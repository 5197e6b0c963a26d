package mesh

import (
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// BenchmarkDecide is the cost of judging a pod from its annotations with
// settings as written: every default applied and every setting parsed on
// each call.
func BenchmarkDecide(b *testing.B) {
	pod := istioPod(map[string]string{
		IstioExcludeOutboundRanges: "10.0.0.0/8,fd00::/8",
		IstioExcludeInboundPorts:   "9000-9100",
	})
	meshes := trustedIstio()
	fams := []rules.Family{rules.IPv4, rules.IPv6}
	b.ReportAllocs()
	for b.Loop() {
		if d, err := Decide(meshes, pod, fams); err != nil || !d.Meshed {
			b.Fatal(d, err)
		}
	}
}

// BenchmarkSetDecide is the per-ADD cost of judging a pod from its
// annotations once the chain entry is parsed (the plugin's Set).
func BenchmarkSetDecide(b *testing.B) {
	pod := istioPod(map[string]string{
		IstioExcludeOutboundRanges: "10.0.0.0/8,fd00::/8",
		IstioExcludeInboundPorts:   "9000-9100",
	})
	eff := map[string]Config{}
	for name, c := range trustedIstio() {
		eff[name] = c.WithDefaults(name)
	}
	s, err := NewSet(eff)
	if err != nil {
		b.Fatal(err)
	}
	fams := []rules.Family{rules.IPv4, rules.IPv6}
	b.ReportAllocs()
	for b.Loop() {
		if d, err := s.Decide(pod, fams); err != nil || !d.Meshed {
			b.Fatal(d, err)
		}
	}
}
