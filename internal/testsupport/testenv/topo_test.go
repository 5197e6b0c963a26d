package testenv_test

import (
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// A run of UDP probes from the pod to closed ports of the peer is refused
// every time, over both families: none is left without its port-unreachable
// by the kernel's ICMP rate limit (a burst of 6, then one a second) to wait
// out its timeout. The differential tests probe many such ports.
func TestTopoClosedUDPPortsRefused(t *testing.T) {
	testenv.NeedRoot(t)
	tp := testenv.NewTopo(t)
	for _, host := range []string{testenv.PeerV4, testenv.PeerV6} {
		for port := 6000; port < 6020; port++ {
			r, err := tp.Connect(tp.Pod, nil, true, host, port)
			if err == nil || !strings.Contains(err.Error(), "refused") {
				t.Errorf("UDP to closed port %s:%d: got %+v, %v; want a refusal", host, port, r, err)
			}
		}
	}
}
