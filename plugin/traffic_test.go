package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// record is what testproxy answers: who accepted the connection and the
// original destination it read.
type record struct {
	Name, Role, Orig string
	Port             int
}

func buildTestproxy(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "testproxy")
	cmd := exec.Command("go", "build", "-o", bin, "../internal/testsupport/testproxy")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build testproxy: %v\n%s", err, out)
	}
	return bin
}

// inNetns runs argv in the netns ("": the host's) as uid.
func inNetns(t *testing.T, netns string, uid int, argv ...string) *exec.Cmd {
	t.Helper()
	priv := append([]string{"setpriv", fmt.Sprintf("--reuid=%d", uid), fmt.Sprintf("--regid=%d", uid), "--clear-groups", "--"}, argv...)
	if netns == "" {
		return exec.Command(priv[0], priv[1:]...)
	}
	return exec.Command("nsenter", append([]string{"--net=" + netns}, priv...)...)
}

func serveIn(t *testing.T, netns string, uid int, argv ...string) {
	t.Helper()
	// The proxy runs as its own UID: its dir must be reachable by it.
	dir, err := os.MkdirTemp("", "mesh-cni-proxy-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	ready := filepath.Join(dir, "ready")
	cmd := inNetns(t, netns, uid, append(argv, "-ready", ready)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := testenv.WaitFor(testenv.Timeout(), func() error { _, err := os.Stat(ready); return err }); err != nil {
		t.Fatalf("%v never got ready: %v", argv, err)
	}
}

// connectFrom dials addr from the netns as uid and returns who answered.
func connectFrom(t *testing.T, proxy, netns string, uid int, addr string) record {
	t.Helper()
	return connectFromSource(t, proxy, netns, uid, "", addr)
}

// connectFromSource is connectFrom bound to a source address ("": any).
func connectFromSource(t *testing.T, proxy, netns string, uid int, source, addr string) record {
	t.Helper()
	var out []byte
	argv := []string{proxy, "connect", "-timeout", testenv.Scale(2 * time.Second).String()}
	if source != "" {
		argv = append(argv, "-source", source)
	}
	// Retried within the shared timeout: IPv6 addresses may still be settling.
	err := testenv.WaitFor(testenv.Timeout(), func() error {
		var err error
		out, err = inNetns(t, netns, uid, append(argv, addr)...).CombinedOutput()
		return err
	})
	if err != nil {
		t.Fatalf("connect %s from uid %d: %v: %s", addr, uid, err, out)
	}
	var r record
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("answer %q: %v", out, err)
	}
	return r
}

// podIPs reads the pod's addresses and gateways (ptp puts the gateway
// address on the host side) from the result libcni cached.
func podIPs(t *testing.T, c *chain, p *pod) (ips, gws []net.IP) {
	t.Helper()
	r, err := c.cni.GetNetworkListCachedResult(c.list, p.rt)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := current.NewResultFromResult(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, ip := range cur.IPs {
		ips = append(ips, ip.Address.IP)
		gws = append(gws, ip.Gateway)
	}
	return ips, gws
}

// TestTraffic sends real connections through a pod wired by the whole
// chain (ptp, then mesh-cni): the app's outbound connection lands at the
// proxy with its original destination, a peer's inbound connection lands
// at the inbound port, and the proxy's own connections go out directly.
// The peer is the host itself (ptp's gateway address): pod-to-pod traffic
// crosses the host's FORWARD chain, which Docker on a test machine drops.
func TestTraffic(t *testing.T) {
	proxy := buildTestproxy(t)
	for i, b := range []string{"nftables", "iptables-legacy"} {
		t.Run(b, func(t *testing.T) {
			c := newChain(t, newNodeEnv(t), chainOpts{version: "1.0.0", families: "dual", subnet: 60 + i, mesh: map[string]any{"backend": b}})
			meshed := newPod(t, "shop", "web-1", istioAnnotations(nil))
			c.mustAdd(meshed)
			checkRedirected(t, proxy, c, meshed, fmt.Sprint(testenv.HostPort(t)))
		})
	}
}

// checkRedirected sends real connections through a meshed pod whose proxy
// runs as uid 1337 with Istio's ports: the app's outbound connection and a
// peer's inbound one land at the proxy with their original destinations,
// the proxy's own goes out directly. The peer listens on the host at port.
func checkRedirected(t *testing.T, proxy string, c *chain, meshed *pod, peerPort string) {
	t.Helper()
	podIPs, gws := podIPs(t, c, meshed)
	serveIn(t, meshed.netns.Path(), 1337, proxy, "serve", "-name", "proxy", "-outbound", "15001", "-inbound", "15006")
	serveIn(t, "", 0, proxy, "serve", "-name", "peer", "-ports", peerPort)
	for fi := range podIPs {
		peerAddr := net.JoinHostPort(gws[fi].String(), peerPort)
		podAddr := net.JoinHostPort(podIPs[fi].String(), "8080")

		if r := connectFrom(t, proxy, meshed.netns.Path(), 1000, peerAddr); r.Name != "proxy" || r.Role != "outbound" || r.Orig != peerAddr {
			t.Errorf("app → %s: answered by %+v, want the proxy's outbound port with the original destination", peerAddr, r)
		}
		if r := connectFrom(t, proxy, "", 0, podAddr); r.Name != "proxy" || r.Role != "inbound" || r.Orig != podAddr {
			t.Errorf("peer → %s: answered by %+v, want the proxy's inbound port with the original destination", podAddr, r)
		}
		if r := connectFrom(t, proxy, meshed.netns.Path(), 1337, peerAddr); r.Name != "peer" {
			t.Errorf("proxy → %s: answered by %+v, want the peer itself (no loop)", peerAddr, r)
		}
	}
}
