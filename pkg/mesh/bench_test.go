package mesh

import (
	"testing"

	"github.com/mesh-cni/mesh-cni/pkg/rules"
)

// BenchmarkDecide is the per-ADD cost of judging a pod from its annotations.
func BenchmarkDecide(b *testing.B) {
	pod := istioPod(map[string]string{
		IstioExcludeOutboundRanges: "10.0.0.0/8,fd00::/8",
		IstioExcludeInboundPorts:   "9000-9100",
	})
	meshes := defaultMeshes()
	fams := []rules.Family{rules.IPv4, rules.IPv6}
	b.ReportAllocs()
	for b.Loop() {
		if d, err := Decide(meshes, pod, fams); err != nil || !d.Meshed {
			b.Fatal(d, err)
		}
	}
}
