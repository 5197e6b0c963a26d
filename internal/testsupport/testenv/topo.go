package testenv

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
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
)

// Addresses of the shared test topology, all in benchmark/documentation
// ranges: pod eth0 <-> peer eth1, and a "remote" network behind the peer.
const (
	PodV4    = "198.18.10.1"
	PeerV4   = "198.18.10.2"
	RemoteV4 = "198.19.1.1"
	PodV6    = "fd00:10::1"
	PeerV6   = "fd00:10::2"
	RemoteV6 = "fd00:20::1"
)

// Record is one line the test proxy (internal/testsupport/testproxy/) answers with.
type Record struct {
	Name   string `json:"name"`
	Role   string `json:"role"`
	Port   int    `json:"port"`
	Proto  string `json:"proto"`
	Peer   string `json:"peer"`
	Orig   string `json:"orig"`
	Source string `json:"source"`
	UID    int    `json:"uid"`
}

// TestProxy builds the test proxy (internal/testsupport/testproxy/) once per test binary, so
// processes of any UID can run it.
func TestProxy(t testing.TB) string {
	t.Helper()
	return GoBinary(t, "internal/testsupport/testproxy", "testproxy")
}

// Topo is a pod netns wired to a peer netns by a veth pair.
type Topo struct {
	Pod, Peer ns.NetNS
	dir       string
	proxy     string
	procs     []proc
}

// proc is a started server and the end of its Wait.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// NewTopo makes the two namespaces and their links; they and every process
// started in them go at the end of the test.
func NewTopo(t testing.TB) *Topo {
	t.Helper()
	pod, err := testutils.NewNS()
	if err != nil {
		t.Fatalf("pod netns: %v", err)
	}
	peer, err := testutils.NewNS()
	if err != nil {
		t.Fatalf("peer netns: %v", err)
	}
	// Processes of any UID write their ready files here, so not
	// t.TempDir (its parent is private to root).
	dir, err := os.MkdirTemp("", "mesh-cni-topo-")
	if err == nil {
		err = os.Chmod(dir, 0o777)
	}
	if err != nil {
		t.Fatal(err)
	}
	tp := &Topo{Pod: pod, Peer: peer, dir: dir, proxy: TestProxy(t)}
	t.Cleanup(func() {
		if err := tp.close(); err != nil {
			t.Errorf("topology teardown: %v", err)
		}
	})
	err = pod.Do(func(ns.NetNS) error {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "eth1",
			PeerNamespace: netlink.NsFd(int(peer.Fd()))}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("veth: %w", err)
		}
		return setupLinks("eth0", []string{PodV4 + "/24", PodV6 + "/64"}, nil, []string{PeerV4, PeerV6})
	})
	if err != nil {
		t.Fatal(err)
	}
	err = peer.Do(func(ns.NetNS) error {
		return setupLinks("eth1", []string{PeerV4 + "/24", PeerV6 + "/64"}, []string{RemoteV4 + "/32", RemoteV6 + "/128"}, nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []ns.NetNS{pod, peer} {
		if err := n.Do(func(ns.NetNS) error { return noICMPRateLimit() }); err != nil {
			t.Fatal(err)
		}
	}
	return tp
}

// noICMPRateLimit lifts the kernel's per-destination ICMP rate limit
// (icmp_ratelimit, 1 s after a burst of 6) in the calling thread's netns.
// A UDP probe to a closed port is refused by a port-unreachable at once;
// rate-limited, every third or so of a run of them got no ICMP and waited
// out its connect timeout instead (the same "no answer", seconds later).
func noICMPRateLimit() error {
	for _, f := range []string{"/proc/sys/net/ipv4/icmp_ratelimit", "/proc/sys/net/ipv6/icmp/ratelimit"} {
		if err := os.WriteFile(f, []byte("0"), 0o644); err != nil {
			return fmt.Errorf("lifting the ICMP rate limit: %w", err)
		}
	}
	return nil
}

// addrNoDAD puts a (a prefix) on l, usable at once: no duplicate address
// detection.
func addrNoDAD(l netlink.Link, a string) error {
	addr, err := netlink.ParseAddr(a)
	if err != nil {
		return err
	}
	addr.Flags = unix.IFA_F_NODAD
	return netlink.AddrAdd(l, addr)
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
	for _, a := range addrs {
		if err := addrNoDAD(link, a); err != nil {
			return fmt.Errorf("addr %s: %w", a, err)
		}
	}
	for _, a := range loAddrs {
		if err := addrNoDAD(lo, a); err != nil {
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

// Dir is a scratch dir every UID may write (ready files, proxy logs).
func (tp *Topo) Dir() string { return tp.dir }

func (tp *Topo) close() error {
	for _, p := range tp.procs {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	var errs []error
	for _, n := range []ns.NetNS{tp.Pod, tp.Peer} {
		errs = append(errs, RemoveNS(n))
	}
	os.RemoveAll(tp.dir)
	return errors.Join(errs...)
}

// Cred is a process identity: nil runs as root.
func Cred(uid, gid uint32, groups ...uint32) *syscall.Credential {
	return &syscall.Credential{Uid: uid, Gid: gid, Groups: groups}
}

// Serve runs `testproxy serve args...` in netns n with cred, and waits
// until it listens. A non-root server gets NET_ADMIN as an ambient
// capability: IP_TRANSPARENT needs it, as a TPROXY-mode sidecar has it.
func (tp *Topo) Serve(t testing.TB, n ns.NetNS, cred *syscall.Credential, args ...string) {
	t.Helper()
	ready := filepath.Join(tp.dir, fmt.Sprintf("ready-%d", len(tp.procs)))
	cmd := exec.Command(tp.proxy, append([]string{"serve", "-ready", ready}, args...)...)
	cmd.Stderr = os.Stderr
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, AmbientCaps: []uintptr{unix.CAP_NET_ADMIN}}
	}
	if err := n.Do(func(ns.NetNS) error { return cmd.Start() }); err != nil {
		t.Fatalf("start testproxy %v: %v", args, err)
	}
	p := proc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	tp.procs = append(tp.procs, p)
	err := WaitFor(Timeout(), func() error {
		select {
		case <-p.done:
			return nil // reported below
		default:
		}
		_, err := os.Stat(ready)
		return err
	})
	select {
	case <-p.done:
		t.Fatalf("testproxy %v exited: %v", args, cmd.ProcessState)
	default:
	}
	if err != nil {
		t.Fatalf("testproxy %v did not start: %v", args, err)
	}
}

// Connect runs `testproxy connect` in netns n with cred (exactly that UID,
// GID and supplementary groups; nil: root) and returns the record the far
// end answered with.
func (tp *Topo) Connect(n ns.NetNS, cred *syscall.Credential, udp bool, host string, port int) (Record, error) {
	return connect(tp.proxy, n, cred, udp, "", host, port)
}

// ConnectFrom is Connect over TCP as root from the local address source
// (one PeerAddress put on the peer, say), so the far end sees that source.
func (tp *Topo) ConnectFrom(n ns.NetNS, source, host string, port int) (Record, error) {
	return connect(tp.proxy, n, nil, false, source, host, port)
}

// Connect is Topo.Connect for a netns of any topology, once a Topo (or
// TestProxy) has built the test proxy.
func Connect(n ns.NetNS, cred *syscall.Credential, udp bool, host string, port int) (Record, error) {
	bin, ok := builtBinary("internal/testsupport/testproxy")
	if !ok {
		return Record{}, fmt.Errorf("testenv.Connect before the test proxy was built (TestProxy)")
	}
	return connect(bin, n, cred, udp, "", host, port)
}

func connect(proxy string, n ns.NetNS, cred *syscall.Credential, udp bool, source, host string, port int) (Record, error) {
	args := []string{"connect", "-timeout", Scale(2 * time.Second).String()}
	if udp {
		args = append(args, "-udp")
	}
	if source != "" {
		args = append(args, "-source", source)
	}
	args = append(args, net.JoinHostPort(host, fmt.Sprint(port)))
	cmd := exec.Command(proxy, args...)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := n.Do(func(ns.NetNS) error { return cmd.Run() }); err != nil {
		return Record{}, fmt.Errorf("connect %s:%d: %w: %s", host, port, err, strings.TrimSpace(stderr.String()))
	}
	var r Record
	line, _ := bufio.NewReader(&out).ReadBytes('\n')
	if err := json.Unmarshal(line, &r); err != nil {
		return Record{}, fmt.Errorf("connect %s:%d: answer %q: %w", host, port, out.String(), err)
	}
	return r, nil
}

// PeerAddress puts addr (a host address, IPv4 or IPv6) on the peer's
// loopback: the pod reaches it through its default route, so a test can
// pick destinations inside any range.
func (tp *Topo) PeerAddress(t testing.TB, addr netip.Addr) {
	t.Helper()
	err := tp.Peer.Do(func(ns.NetNS) error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.AddrAdd(lo, &netlink.Addr{IPNet: netipNet(netip.PrefixFrom(addr, addr.BitLen())), Flags: unix.IFA_F_NODAD})
	})
	if err != nil {
		t.Fatalf("peer address %s: %v", addr, err)
	}
}

// Link wires a second interface pair: name in the pod with podAddrs, name
// in the peer with peerAddrs (prefixes, no DAD), as a second network
// (Multus) would.
func (tp *Topo) Link(t testing.TB, name string, podAddrs, peerAddrs []string) {
	t.Helper()
	err := tp.Pod.Do(func(ns.NetNS) error {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name,
			PeerNamespace: netlink.NsFd(int(tp.Peer.Fd()))}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("veth: %w", err)
		}
		return setupLinks(name, podAddrs, nil, nil)
	})
	if err == nil {
		err = tp.Peer.Do(func(ns.NetNS) error { return setupLinks(name, peerAddrs, nil, nil) })
	}
	if err != nil {
		t.Fatalf("link %s: %v", name, err)
	}
}

func netipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
