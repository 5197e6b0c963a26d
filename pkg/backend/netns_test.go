package backend_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/mesh-cni/mesh-cni/pkg/testenv"
)

// Addresses of the test topology, all in benchmark/documentation ranges:
// pod eth0 <-> peer eth1, and a "remote" network behind the peer used as a
// skip subnet.
const (
	podV4    = "198.18.10.1"
	peerV4   = "198.18.10.2"
	remoteV4 = "198.19.1.1"
	podV6    = "fd00:10::1"
	peerV6   = "fd00:10::2"
	remoteV6 = "fd00:20::1"

	proxyUID = 1337
	appUID   = 1000

	outboundPort = 15001
	inboundPort  = 15006
	dnsPort      = 15053
	appPort      = 8080 // app listens in the pod, peer listens too
	ignoredOut   = 9090 // peer listens; never redirected outbound
	ignoredIn    = 9091 // app listens; never redirected inbound
)

// testproxyBin is built once by TestMain into a world-readable dir, so the
// proxy and app UIDs can run it.
var testproxyBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mesh-cni-backend-")
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testproxyBin = filepath.Join(dir, "testproxy")
	build := exec.Command("go", "build", "-o", testproxyBin, "github.com/mesh-cni/mesh-cni/testproxy")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build testproxy: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// record is one line the test proxy answers with.
type record struct {
	Name   string `json:"name"`
	Role   string `json:"role"`
	Port   int    `json:"port"`
	Proto  string `json:"proto"`
	Peer   string `json:"peer"`
	Orig   string `json:"orig"`
	Source string `json:"source"`
	UID    int    `json:"uid"`
}

// topo is a pod netns wired to a peer netns by a veth pair.
type topo struct {
	pod, peer ns.NetNS
	dir       string
	procs     []*exec.Cmd
}

func newTopo(t testing.TB) *topo {
	t.Helper()
	pod, err := testutils.NewNS()
	if err != nil {
		t.Fatalf("pod netns: %v", err)
	}
	peer, err := testutils.NewNS()
	if err != nil {
		t.Fatalf("peer netns: %v", err)
	}
	// The proxy and app UIDs write their ready files here, so not
	// t.TempDir (its parent is private to root).
	dir, err := os.MkdirTemp("", "mesh-cni-topo-")
	if err == nil {
		err = os.Chmod(dir, 0o777)
	}
	if err != nil {
		t.Fatal(err)
	}
	tp := &topo{pod: pod, peer: peer, dir: dir}
	t.Cleanup(tp.close)
	err = pod.Do(func(ns.NetNS) error {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "eth1",
			PeerNamespace: netlink.NsFd(int(peer.Fd()))}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("veth: %w", err)
		}
		return setupLinks("eth0", []string{podV4 + "/24", podV6 + "/64"}, nil, []string{peerV4, peerV6})
	})
	if err != nil {
		t.Fatal(err)
	}
	err = peer.Do(func(ns.NetNS) error {
		return setupLinks("eth1", []string{peerV4 + "/24", peerV6 + "/64"}, []string{remoteV4 + "/32", remoteV6 + "/128"}, nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	return tp
}

// setupLinks brings lo and dev up with addrs (no DAD), loAddrs on lo, and
// default routes via gws.
func setupLinks(dev string, addrs, loAddrs, gws []string) error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	link, err := netlink.LinkByName(dev)
	if err != nil {
		return err
	}
	for _, l := range []netlink.Link{lo, link} {
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
	}
	add := func(l netlink.Link, a string) error {
		addr, err := netlink.ParseAddr(a)
		if err != nil {
			return err
		}
		addr.Flags = unix.IFA_F_NODAD
		return netlink.AddrAdd(l, addr)
	}
	for _, a := range addrs {
		if err := add(link, a); err != nil {
			return fmt.Errorf("addr %s: %w", a, err)
		}
	}
	for _, a := range loAddrs {
		if err := add(lo, a); err != nil {
			return fmt.Errorf("addr %s: %w", a, err)
		}
	}
	for _, gw := range gws {
		ip := net.ParseIP(gw)
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: ip}); err != nil {
			return fmt.Errorf("default via %s: %w", gw, err)
		}
	}
	return nil
}

func (tp *topo) close() {
	for _, c := range tp.procs {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	for _, n := range []ns.NetNS{tp.pod, tp.peer} {
		n.Close()
		_ = testutils.UnmountNS(n)
	}
	os.RemoveAll(tp.dir)
}

// start runs testproxy serve in netns n as uid (0: root), and waits until it
// listens.
func (tp *topo) start(t testing.TB, n ns.NetNS, uid uint32, args ...string) {
	t.Helper()
	ready := filepath.Join(tp.dir, fmt.Sprintf("ready-%d", len(tp.procs)))
	cmd := exec.Command(testproxyBin, append([]string{"serve", "-ready", ready}, args...)...)
	cmd.Stderr = os.Stderr
	if uid != 0 {
		// NET_ADMIN as an ambient capability: IP_TRANSPARENT needs it,
		// like a TPROXY-mode sidecar.
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Credential:  &syscall.Credential{Uid: uid, Gid: uid},
			AmbientCaps: []uintptr{unix.CAP_NET_ADMIN},
		}
	}
	if err := n.Do(func(ns.NetNS) error { return cmd.Start() }); err != nil {
		t.Fatalf("start testproxy %v: %v", args, err)
	}
	tp.procs = append(tp.procs, cmd)
	deadline := time.Now().Add(testenv.Timeout())
	for {
		if _, err := os.Stat(ready); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testproxy %v did not start within %v", args, testenv.Timeout())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// connect runs testproxy connect in netns n as uid and returns the record
// the far end answered with.
func connect(n ns.NetNS, uid uint32, udp bool, host string, port int) (record, error) {
	args := []string{"connect", "-timeout", "2s"}
	if udp {
		args = append(args, "-udp")
	}
	args = append(args, net.JoinHostPort(host, fmt.Sprint(port)))
	cmd := exec.Command(testproxyBin, args...)
	if uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	}
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := n.Do(func(ns.NetNS) error { return cmd.Run() }); err != nil {
		return record{}, fmt.Errorf("connect %s:%d: %v: %s", host, port, err, strings.TrimSpace(stderr.String()))
	}
	var r record
	line, _ := bufio.NewReader(&out).ReadBytes('\n')
	if err := json.Unmarshal(line, &r); err != nil {
		return record{}, fmt.Errorf("connect %s:%d: answer %q: %v", host, port, out.String(), err)
	}
	return r, nil
}

// run runs a command in netns n and returns its output. iptables takes the
// netns' own lock, never the host-wide one.
func run(n ns.NetNS, name string, args ...string) (string, error) {
	var out []byte
	err := n.Do(func(ns.NetNS) error {
		cmd := exec.Command(name, args...)
		cmd.Env = append(os.Environ(), "XTABLES_LOCKFILE="+n.Path())
		var err error
		out, err = cmd.CombinedOutput()
		return err
	})
	return string(out), err
}
