package backend_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// TestTProxyFailsClosed: in TPROXY mode, while no proxy listens on the
// inbound port, a connection to a port the app listens on must not reach
// the app, with every backend and in both families. iptables' TPROXY target
// drops such a packet; nft's tproxy statement falls through, so the rule
// set must drop it itself. Once the proxy listens, inbound reaches it.
func TestTProxyFailsClosed(t *testing.T) {
	for _, name := range backends {
		t.Run(name, func(t *testing.T) {
			b := mustNew(t, name)
			tp := newTopo(t)
			tp.start(t, tp.pod, appUID, "-name", "app", "-ports", fmt.Sprintf("%d,%d", appPort, ignoredIn))
			for _, f := range testFamilies {
				expect(t, f.name+" inbound reaches the app before Apply", tp.peer, 0, false, f.pod, appPort, "app", "app", "")
			}
			rs := rules.Generate(testSpec(rules.TProxy))
			if err := b.Apply(tp.pod.Path(), rs); err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if err := b.Check(tp.pod.Path(), rs); err != nil {
				t.Fatalf("Check: %v", err)
			}
			for _, f := range testFamilies {
				t.Run(f.name, func(t *testing.T) {
					r, err := connect(tp.peer, 0, false, f.pod, appPort)
					if err == nil {
						t.Errorf("no proxy listening: inbound to the app port was answered by %s/%s port %d, want no connection",
							r.Name, r.Role, r.Port)
					} else if !strings.Contains(err.Error(), "timeout") && !strings.Contains(err.Error(), "refused") {
						t.Errorf("no proxy listening: want a timeout or a refusal, got %v", err)
					}
					expect(t, "ignored inbound port still reaches the app", tp.peer, 0, false, f.pod, ignoredIn, "app", "app", "")
				})
			}
			tp.start(t, tp.pod, proxyUID, "-name", "proxy", "-inbound", fmt.Sprint(inboundPort), "-tproxy")
			for _, f := range testFamilies {
				expect(t, f.name+" inbound lands at the proxy once it listens", tp.peer, 0, false, f.pod, appPort, "proxy", "inbound", "")
			}
			if err := b.Delete(tp.pod.Path()); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			expectClean(t, tp.pod)
		})
	}
}
