package backend_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/mesh-cni/mesh-cni/internal/backend"
	"github.com/mesh-cni/mesh-cni/internal/rules"
)

var backends = []string{"nftables", "iptables-nft", "iptables-legacy"}

// testSpec is the pod contract of the traffic tests.
func testSpec(mode rules.Mode) rules.Spec {
	return rules.Spec{
		Mesh:          "test",
		Families:      []rules.Family{rules.IPv4, rules.IPv6},
		ProxyUID:      proxyUID,
		InboundPort:   inboundPort,
		OutboundPort:  outboundPort,
		Mode:          mode,
		IgnoreInbound: []rules.PortRange{{First: ignoredIn, Last: ignoredIn}},
		// Two entries each, so the nftables backend uses anonymous sets.
		IgnoreOutbound: []rules.PortRange{{First: ignoredOut, Last: ignoredOut}, {First: 9095, Last: 9099}},
		SkipOutboundSubnets: []netip.Prefix{netip.MustParsePrefix("198.19.1.0/24"), netip.MustParsePrefix("203.0.113.0/24"),
			netip.MustParsePrefix("fd00:20::/64"), netip.MustParsePrefix("2001:db8::/32")},
		CaptureDNS: true,
		DNSPort:    dnsPort,
	}
}

type family struct {
	name              string
	pod, peer, remote string
}

var testFamilies = []family{
	{"ipv4", podV4, peerV4, remoteV4},
	{"ipv6", podV6, peerV6, remoteV6},
}

// TestTraffic programs each backend into a real pod netns and sends real
// connections through it, in both families and both inbound modes.
func TestTraffic(t *testing.T) {
	for _, name := range backends {
		for _, mode := range []rules.Mode{rules.Redirect, rules.TProxy} {
			t.Run(name+"/"+string(mode), func(t *testing.T) {
				b, err := backend.New(name)
				if err != nil {
					t.Fatal(err)
				}
				trafficTest(t, b, mode)
			})
		}
	}
}

func trafficTest(t *testing.T, b backend.Backend, mode rules.Mode) {
	tp := newTopo(t)
	tp.start(t, tp.peer, 0, "-name", "peer", "-ports", fmt.Sprintf("%d,%d,53", appPort, ignoredOut))
	tp.start(t, tp.pod, appUID, "-name", "app", "-ports", fmt.Sprintf("%d,%d", appPort, ignoredIn))
	proxyLog := filepath.Join(tp.Dir(), "proxy.log")
	proxyArgs := []string{"-name", "proxy", "-outbound", fmt.Sprint(outboundPort), "-inbound", fmt.Sprint(inboundPort), "-dns", fmt.Sprint(dnsPort), "-log", proxyLog}
	if mode == rules.TProxy {
		proxyArgs = append(proxyArgs, "-tproxy")
	}
	tp.start(t, tp.pod, proxyUID, proxyArgs...)

	// Before: everything direct.
	expectDirect(t, tp)

	rs := rules.Generate(testSpec(mode))
	if err := b.Apply(tp.pod.Path(), rs); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if err := b.Check(tp.pod.Path(), rs); err != nil {
		t.Fatalf("Check after Apply: %v", err)
	}
	if testing.Verbose() {
		for _, c := range []string{"nft list ruleset", "iptables-legacy-save", "ip6tables-legacy-save", "ip rule show", "ip -6 route show table all"} {
			out, _ := run(tp.pod, "sh", "-c", c)
			t.Logf("%s:\n%s", c, out)
		}
	}
	for _, f := range testFamilies {
		t.Run(f.name, func(t *testing.T) {
			expect(t, "app outbound lands at the proxy's outbound port", tp.pod, appUID, false, f.peer, appPort,
				"proxy", "outbound", net.JoinHostPort(f.peer, fmt.Sprint(appPort)))
			expect(t, "inbound from the peer lands at the proxy's inbound port", tp.peer, 0, false, f.pod, appPort,
				"proxy", "inbound", net.JoinHostPort(f.pod, fmt.Sprint(appPort)))
			expect(t, "ignored outbound port goes direct", tp.pod, appUID, false, f.peer, ignoredOut, "peer", "app", "")
			expect(t, "ignored inbound port reaches the app", tp.peer, 0, false, f.pod, ignoredIn, "app", "app", "")
			expect(t, "skip subnet goes direct", tp.pod, appUID, false, f.remote, appPort, "peer", "app", "")
			expect(t, "the proxy's own traffic does not loop", tp.pod, proxyUID, false, f.peer, appPort, "peer", "app", "")
			expect(t, "DNS over UDP goes to the DNS port", tp.pod, appUID, true, f.peer, 53, "proxy", "dns", "")
			expect(t, "DNS over TCP goes to the DNS port", tp.pod, appUID, false, f.peer, 53, "proxy", "dns", "")
		})
	}

	// The proxy logged what it answered: one JSON line per connection.
	logged := readLog(t, proxyLog)
	for _, want := range []record{
		{Role: "outbound", Proto: "tcp", Orig: net.JoinHostPort(peerV4, fmt.Sprint(appPort))},
		{Role: "outbound", Proto: "tcp", Orig: net.JoinHostPort(peerV6, fmt.Sprint(appPort))},
		{Role: "inbound", Proto: "tcp", Orig: net.JoinHostPort(podV6, fmt.Sprint(appPort))},
		{Role: "dns", Proto: "udp"},
	} {
		found := false
		for _, r := range logged {
			if r.Name == "proxy" && r.UID == proxyUID && r.Role == want.Role && r.Proto == want.Proto && (want.Orig == "" || r.Orig == want.Orig) {
				found = true
			}
		}
		if !found {
			t.Errorf("proxy log has no %s %s record to %s: %v", want.Role, want.Proto, want.Orig, logged)
		}
	}

	// Re-apply is idempotent: same rules, same behaviour.
	if err := b.Apply(tp.pod.Path(), rs); err != nil {
		t.Fatalf("second Apply: %v", err)
	}
	if err := b.Check(tp.pod.Path(), rs); err != nil {
		t.Fatalf("Check after second Apply: %v", err)
	}
	expect(t, "outbound after re-apply", tp.pod, appUID, false, peerV4, appPort, "proxy", "outbound", "")

	if err := b.Delete(tp.pod.Path()); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := b.Check(tp.pod.Path(), rs); err == nil {
		t.Error("Check after Delete: no error")
	}
	expectDirect(t, tp)
	expectClean(t, tp.pod)
	if err := b.Delete(tp.pod.Path()); err != nil {
		t.Errorf("second Delete: %v", err)
	}
	// The netns is as good as new: Apply works again.
	if err := b.Apply(tp.pod.Path(), rs); err != nil {
		t.Fatalf("Apply after Delete: %v", err)
	}
	if err := b.Check(tp.pod.Path(), rs); err != nil {
		t.Fatalf("Check after Apply after Delete: %v", err)
	}
	expect(t, "outbound after Delete and Apply", tp.pod, appUID, false, peerV6, appPort, "proxy", "outbound", "")
	if err := b.Delete(tp.pod.Path()); err != nil {
		t.Fatalf("last Delete: %v", err)
	}
	expectClean(t, tp.pod)
}

func expectDirect(t *testing.T, tp *topo) {
	t.Helper()
	for _, f := range testFamilies {
		expect(t, f.name+" outbound direct", tp.pod, appUID, false, f.peer, appPort, "peer", "app", "")
		expect(t, f.name+" inbound direct", tp.peer, 0, false, f.pod, appPort, "app", "app", "")
	}
}

// expect connects and checks who answered, in which role, and (when orig
// is set) the original destination the proxy saw.
func expect(t *testing.T, what string, n ns.NetNS, uid uint32, udp bool, host string, port int, name, role, orig string) {
	t.Helper()
	r, err := connect(n, uid, udp, host, port)
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	if r.Name != name || r.Role != role || (orig != "" && r.Orig != orig) {
		t.Errorf("%s: answered by %s/%s port %d orig %s (%s), want %s/%s orig %q", what, r.Name, r.Role, r.Port, r.Orig, r.Source, name, role, orig)
	}
}

// expectClean checks that no backend left anything of ours in the netns.
func expectClean(t *testing.T, n ns.NetNS) {
	t.Helper()
	for _, c := range [][]string{
		{"nft", "list", "ruleset"},
		{"iptables-nft-save"}, {"ip6tables-nft-save"},
		{"iptables-legacy-save"}, {"ip6tables-legacy-save"},
		{"ip", "-4", "rule", "show"}, {"ip", "-6", "rule", "show"},
		{"ip", "-4", "route", "show", "table", "all"}, {"ip", "-6", "route", "show", "table", "all"},
	} {
		out, err := run(n, c[0], c[1:]...)
		if err != nil {
			t.Errorf("%v: %v\n%s", c, err, out)
			continue
		}
		if strings.Contains(out, "MESH_") || strings.Contains(out, rules.NftTable) || strings.Contains(out, "proto 109") {
			t.Errorf("%v still shows our rules:\n%s", c, out)
		}
	}
}

// TestSingleFamily programs one family only: that family is redirected,
// the other one is left alone (rules without addresses are pinned to the
// family, not applied to both).
func TestSingleFamily(t *testing.T) {
	for _, name := range backends {
		for i, f := range testFamilies {
			other := testFamilies[1-i]
			t.Run(name+"/"+f.name, func(t *testing.T) {
				b := mustNew(t, name)
				tp := newTopo(t)
				tp.start(t, tp.peer, 0, "-name", "peer", "-ports", fmt.Sprint(appPort))
				tp.start(t, tp.pod, proxyUID, "-name", "proxy", "-outbound", fmt.Sprint(outboundPort), "-inbound", fmt.Sprint(inboundPort))
				spec := testSpec(rules.Redirect)
				spec.Families = []rules.Family{rules.IPv4}
				if f.name == "ipv6" {
					spec.Families = []rules.Family{rules.IPv6}
				}
				rs := rules.Generate(spec)
				if err := b.Apply(tp.pod.Path(), rs); err != nil {
					t.Fatal(err)
				}
				if err := b.Check(tp.pod.Path(), rs); err != nil {
					t.Fatal(err)
				}
				expect(t, f.name+" redirected", tp.pod, appUID, false, f.peer, appPort, "proxy", "outbound", "")
				expect(t, other.name+" left alone", tp.pod, appUID, false, other.peer, appPort, "peer", "app", "")
				if err := b.Delete(tp.pod.Path()); err != nil {
					t.Fatal(err)
				}
				expectClean(t, tp.pod)
			})
		}
	}
}

func readLog(t *testing.T, path string) []record {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("proxy log: %v", err)
	}
	var out []record
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var r record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("proxy log line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}
