package backend_test

import (
	"fmt"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// TestUIDRangeExemption: an exempted UID range (Consul's ExcludeUIDs,
// Kuma's excludePortsForUIDs) lets every UID of the range out directly,
// first, middle and last, and no UID next to it; a range limited to a
// protocol and port exempts only that port. Real TCP from processes
// running under each UID, through each backend, in both families.
func TestUIDRangeExemption(t *testing.T) {
	const otherPort = appPort + 1
	spec := testSpec(rules.Redirect)
	spec.ExemptUIDs = []rules.UIDExemption{
		{First: 5000, Last: 5009},
		{First: 6000, Last: 6004, Proto: rules.TCP, Ports: []rules.PortRange{{First: appPort, Last: appPort}}},
	}
	rs := rules.Generate(spec)
	for _, name := range backends {
		t.Run(name, func(t *testing.T) {
			b := mustNew(t, name)
			tp := newTopo(t)
			tp.start(t, tp.peer, 0, "-name", "peer", "-ports", fmt.Sprintf("%d,%d", appPort, otherPort))
			tp.start(t, tp.pod, proxyUID, "-name", "proxy", "-outbound", fmt.Sprint(outboundPort), "-inbound", fmt.Sprint(inboundPort))
			if err := b.Apply(tp.pod.Path(), rs); err != nil {
				t.Fatal(err)
			}
			if err := b.Check(tp.pod.Path(), rs); err != nil {
				t.Fatal(err)
			}
			for _, f := range testFamilies {
				for _, c := range []struct {
					uid    uint32
					port   int
					direct bool
				}{
					{4999, appPort, false}, {5000, appPort, true}, {5001, appPort, true}, {5005, appPort, true},
					{5009, appPort, true}, {5009, otherPort, true}, {5010, appPort, false},
					{5999, appPort, false}, {6000, appPort, true}, {6002, appPort, true}, {6004, appPort, true},
					{6002, otherPort, false}, {6005, appPort, false},
				} {
					what := fmt.Sprintf("%s uid %d to port %d", f.name, c.uid, c.port)
					if c.direct {
						expect(t, what+" goes direct", tp.pod, c.uid, false, f.peer, c.port, "peer", "app", "")
					} else {
						expect(t, what+" lands at the proxy", tp.pod, c.uid, false, f.peer, c.port, "proxy", "outbound", "")
					}
				}
			}
			if err := b.Delete(tp.pod.Path()); err != nil {
				t.Fatal(err)
			}
			expectClean(t, tp.pod)
		})
	}
}
