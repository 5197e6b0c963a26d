package main

import (
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// kumaInjected are the annotations Kuma's injector writes on a pod in CNI
// mode (kumahq/kuma v2.14.3 pkg/transparentproxy/kubernetes/
// kubernetes_config.go:483-539, ConfigToAnnotations: sidecar-injected and
// the config YAML; the sidecar runs as 5678:5678, pkg/plugins/runtime/k8s/
// containers/factory.go:173-174).
func kumaInjected() map[string]string {
	return map[string]string{
		"kuma.io/sidecar-injected":             "true",
		"kuma.io/application-probe-proxy-port": "9001",
		"traffic.kuma.io/transparent-proxy-config": `cniMode: true
ipFamilyMode: dualstack
kumaDPUser: "5678"
redirect:
  dns: {enabled: false, port: 15053}
  inbound: {enabled: true, port: 15006, excludePorts: [9001]}
  outbound: {enabled: true, port: 15001}
`,
	}
}

// Identities as the kubelet gives them: the app's pod-level runAsUser and
// runAsGroup, kuma-sidecar's own 5678:5678.
const kumaAppUID, kumaDPUID = 1000, 5678

// TestKumaIPv6 wires Kuma pods through the whole chain (ptp, then
// mesh-cni) and checks what kuma-cni gives them: IPv6 is redirected
// whenever the pod has any non-loopback IPv6 address, link-local included,
// and ::6/128 is on lo, so kuma-validation's IPv6 check (the proxy's UID
// connecting from ::1 to ::6 lands at the inbound port; kumahq/kuma
// v2.14.3 pkg/transparentproxy/validate/validator.go:38-56,176-207)
// passes. The IPv4-only pod has only eth0's fe80:: address in IPv6: its
// app's link-local connections are intercepted (the kernel cannot deliver
// a link-local connection redirected to ::1, so they fail closed, as under
// kuma-cni); the dual-stack pod's app lands at the proxy over IPv6.
func TestKumaIPv6(t *testing.T) {
	proxy := buildTestproxy(t)
	for i, fams := range []string{"v4", "dual"} {
		t.Run(fams, func(t *testing.T) {
			c := newChain(t, newNodeEnv(t), chainOpts{version: "1.0.0", families: fams, subnet: 70 + i, mesh: map[string]any{
				"backend": "nftables",
				"meshes":  map[string]any{"kuma": map[string]any{"enabled": true, "trustAnnotations": true}},
			}})
			p := newPod(t, "shop", "kuma-"+fams, kumaInjected())
			c.mustAdd(p)
			netns := p.netns.Path()
			if out, err := exec.Command("ip", "-n", nsName(netns), "-6", "addr", "show", "dev", "lo").CombinedOutput(); err != nil || !strings.Contains(string(out), "::6/128") {
				t.Errorf("lo lacks ::6/128 (kuma-cni adds it):\n%s %v", out, err)
			}
			serveIn(t, netns, kumaDPUID, proxy, "serve", "-name", "proxy", "-outbound", "15001", "-inbound", "15006")
			port := fmt.Sprint(testenv.HostPort(t))
			serveIn(t, "", 0, proxy, "serve", "-name", "peer", "-ports", port)

			if r := connectFromSource(t, proxy, netns, kumaDPUID, "::1", "[::6]:20001"); r.Name != "proxy" || r.Role != "inbound" {
				t.Errorf("kuma-validation over IPv6 ([::1] to [::6]:20001 as uid %d): %+v, want the proxy's inbound port", kumaDPUID, r)
			}
			ll := net.JoinHostPort(linkLocalPeer(t, p.netns)+"%eth0", port)
			if r := connectFrom(t, proxy, netns, kumaDPUID, ll); r.Name != "peer" {
				t.Errorf("proxy to %s: answered by %+v, want the peer itself", ll, r)
			}
			out, err := inNetns(t, netns, kumaAppUID, proxy, "connect", "-timeout", testenv.Scale(time.Second).String(), ll).CombinedOutput()
			if err == nil && strings.Contains(string(out), `"peer"`) {
				t.Errorf("app to %s (IPv6 link-local) reached the peer directly: %s", ll, out)
			}
			if fams == "dual" {
				_, gws := podIPs(t, c, p)
				gw6 := net.JoinHostPort(gws[len(gws)-1].String(), port)
				if r := connectFrom(t, proxy, netns, kumaAppUID, gw6); r.Name != "proxy" || r.Role != "outbound" || r.Orig != gw6 {
					t.Errorf("app to %s: answered by %+v, want the proxy's outbound port", gw6, r)
				}
			}
			if err := c.check(p); err != nil {
				t.Errorf("CHECK: %v", err)
			}
		})
	}
}

// linkLocalPeer is the fe80:: address of the host side of the pod's eth0.
func linkLocalPeer(t *testing.T, pod ns.NetNS) string {
	t.Helper()
	var peer int
	err := pod.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		peer = l.Attrs().ParentIndex
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var ll string
	err = testenv.WaitFor(testenv.Timeout(), func() error {
		l, err := netlink.LinkByIndex(peer)
		if err != nil {
			return err
		}
		addrs, err := netlink.AddrList(l, netlink.FAMILY_V6)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if a.IP.IsLinkLocalUnicast() {
				ll = a.IP.String()
				return nil
			}
		}
		return fmt.Errorf("host side %s has no link-local address", l.Attrs().Name)
	})
	if err != nil {
		t.Fatal(err)
	}
	return ll
}

func nsName(path string) string { return path[strings.LastIndex(path, "/")+1:] }

// TestKumaIPv6Off: with "ipv6": false a Kuma pod whose only IPv6 address
// is eth0's link-local gets IPv4 rules only and no ::6, rather than being
// refused; one with a global IPv6 address is refused, as every pod is.
func TestKumaIPv6Off(t *testing.T) {
	for i, fams := range []string{"v4", "dual"} {
		t.Run(fams, func(t *testing.T) {
			c := newChain(t, newNodeEnv(t), chainOpts{version: "1.0.0", families: fams, subnet: 72 + i, mesh: map[string]any{
				"backend": "nftables", "ipv6": false,
				"meshes": map[string]any{"kuma": map[string]any{"enabled": true, "trustAnnotations": true}},
			}})
			p := newPod(t, "shop", "kuma-off-"+fams, kumaInjected())
			_, err := c.add(p)
			t.Cleanup(func() { _ = c.del(p) })
			if fams == "dual" {
				if err == nil || !strings.Contains(err.Error(), `"ipv6" is false`) {
					t.Fatalf("ADD: %v, want the IPv6 refusal", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ADD: %v", err)
			}
			if d := ruleDump(t, p.netns.Path()); strings.Contains(fmt.Sprint(d), "ip6 ") {
				t.Errorf("IPv6 rules written with \"ipv6\": false: %v", d)
			}
			if out, _ := exec.Command("ip", "-n", nsName(p.netns.Path()), "-6", "addr", "show", "dev", "lo").CombinedOutput(); strings.Contains(string(out), "::6/128") {
				t.Errorf("::6 added with \"ipv6\": false:\n%s", out)
			}
		})
	}
}
