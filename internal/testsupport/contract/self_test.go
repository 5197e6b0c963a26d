package contract

import (
	"net"
	"net/netip"
	"slices"
	"strconv"
	"testing"
)

// expectSelf checks the proxy's own connection to its pod's address, which
// kuma-cni sends to the inbound port (kumahq/kuma v2.14.3
// pkg/transparentproxy/iptables/builder/builder_table_nat.go:147-155)
// unless an exclusion returned it first: excluded ports in
// KUMA_MESH_OUTBOUND (100-111), excluded addresses and UIDs in OUTPUT,
// ahead of the jump to that chain (228-252, 308-316).
func (p *probes) expectSelf(t *testing.T, podAddr string) {
	t.Helper()
	w := p.w
	a := netip.MustParseAddr(podAddr)
	direct := slices.Contains(w.excludePorts, appPort) || slices.Contains(w.exemptUIDs, w.proxy.id.UID) ||
		slices.ContainsFunc(w.excludeRanges, func(r netip.Prefix) bool { return r.Contains(a) })
	dst := net.JoinHostPort(podAddr, strconv.Itoa(appPort))
	r, err := p.tp.Connect(p.tp.Pod, cred(w.proxy.id), false, podAddr, appPort)
	switch {
	case err != nil:
		t.Errorf("%s to its own pod at %s: %v", w.proxy, dst, err)
	case direct && (r.Name != "app" || r.Port != appPort):
		t.Errorf("%s to its own pod at %s, an excluded destination, should reach the app directly: answered by %+v", w.proxy, dst, r)
	case !direct && (r.Name != "proxy" || r.Port != w.inboundPort):
		t.Errorf("%s to its own pod at %s should reach the proxy's inbound port: answered by %+v", w.proxy, dst, r)
	}
}
