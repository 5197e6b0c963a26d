package rules

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// The traffic test runs real TCP and UDP through the rendered rules: a
// "pod" netns wired to a "peer" netns by a veth pair, a test proxy running
// as the proxy UID that answers with the original destination, an app
// process under another UID, and peers that answer "peer" or "app".
//
// Helper processes are this test binary re-executed inside a netns (ip
// netns exec) with MESH_TRAFFIC_HELPER set; they drop to their UID first.

const helperEnv = "MESH_TRAFFIC_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helper(os.Args[len(os.Args)-1]))
	}
	// Our rules live in private netns: a private xtables lock keeps
	// iptables-legacy from queueing behind the host's (docker, kube-proxy).
	lock, err := os.CreateTemp("", "mesh-rules-xtables-*.lock")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("XTABLES_LOCKFILE", lock.Name())
	code := m.Run()
	os.Remove(lock.Name())
	os.Exit(code)
}

// helper: "listen <uid> <transparent> <reply> <net:addr>..." prints
// "ready" and serves until killed; "dial <uid> <net> <addr>" prints the
// answer; "unanswered <uid> <net> <addr>" how a connection attempt ends
// (failclosed_test.go).
func helper(spec string) int {
	f := strings.Fields(spec)
	uid, _ := strconv.Atoi(f[1])
	fail := func(err error) int { fmt.Fprintln(os.Stderr, err); return 1 }
	switch f[0] {
	case "listen":
		transparent, reply := f[2] == "true", f[3]
		var lns []net.Listener
		var pcs []net.PacketConn
		for _, a := range f[4:] {
			network, addr, _ := strings.Cut(a, ":")
			lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
				var serr error
				c.Control(func(fd uintptr) {
					if transparent {
						serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_TRANSPARENT, 1)
					}
				})
				return serr
			}}
			if strings.HasPrefix(network, "udp") {
				pc, err := lc.ListenPacket(context.Background(), network, addr)
				if err != nil {
					return fail(err)
				}
				pcs = append(pcs, pc)
				continue
			}
			ln, err := lc.Listen(context.Background(), network, addr)
			if err != nil {
				return fail(err)
			}
			lns = append(lns, ln)
		}
		if err := dropTo(uid); err != nil {
			return fail(err)
		}
		for _, ln := range lns {
			go serveTCP(ln, reply)
		}
		for _, pc := range pcs {
			go func() {
				buf := make([]byte, 512)
				for {
					n, from, err := pc.ReadFrom(buf)
					if err != nil {
						return
					}
					pc.WriteTo([]byte(reply+" udp "+string(buf[:n])), from)
				}
			}()
		}
		fmt.Println("ready")
		select {}
	case "unanswered":
		out, err := unanswered(f[2], f[3])
		if err != nil {
			return fail(err)
		}
		fmt.Print(out)
		return 0
	case "invalid":
		n, _ := strconv.Atoi(f[4])
		port, _ := strconv.Atoi(f[3])
		if err := sendInvalid(f[2], port, n); err != nil {
			return fail(err)
		}
		return 0
	case "dial":
		if err := dropTo(uid); err != nil {
			return fail(err)
		}
		d := net.Dialer{Timeout: testenv.Timeout()}
		if len(f) > 4 {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(f[4])}
		}
		c, err := d.Dial(f[2], f[3])
		if err != nil {
			return fail(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(testenv.Timeout()))
		if strings.HasPrefix(f[2], "udp") { // one datagram each way
			c.Write([]byte("query"))
			b := make([]byte, 512)
			n, err := c.Read(b)
			if err != nil {
				return fail(err)
			}
			fmt.Print(string(b[:n]))
			return 0
		}
		b, err := io.ReadAll(io.LimitReader(c, 512))
		if err != nil && len(b) == 0 {
			return fail(err)
		}
		fmt.Print(string(b))
		return 0
	}
	return fail(fmt.Errorf("unknown helper %q", spec))
}

func dropTo(uid int) error {
	if uid == 0 {
		return nil
	}
	if err := syscall.Setgid(uid); err != nil {
		return err
	}
	return syscall.Setuid(uid)
}

// serveTCP answers each connection with what it saw: the local address and
// the original destination (SO_ORIGINAL_DST) when the connection was NATed.
func serveTCP(ln net.Listener, reply string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		msg := reply
		if reply == "proxy" {
			msg = fmt.Sprintf("proxy local=%s orig=%s", c.LocalAddr(), originalDst(c.(*net.TCPConn)))
		}
		c.Write([]byte(msg))
		c.Close()
	}
}

func originalDst(c *net.TCPConn) string {
	raw, err := c.SyscallConn()
	if err != nil {
		return "-"
	}
	out := "-"
	raw.Control(func(fd uintptr) {
		const soOriginalDst = 80 // SO_ORIGINAL_DST and IP6T_SO_ORIGINAL_DST
		if netip.MustParseAddrPort(c.LocalAddr().String()).Addr().Unmap().Is4() {
			if m, err := unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, soOriginalDst); err == nil {
				b := m.Multiaddr // struct sockaddr_in
				out = netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), uint16(b[2])<<8|uint16(b[3])).String()
			}
			return
		}
		if m, err := unix.GetsockoptIPv6MTUInfo(int(fd), unix.SOL_IPV6, soOriginalDst); err == nil {
			a := m.Addr   // struct sockaddr_in6
			var p [2]byte // the port is in network order in memory
			binary.NativeEndian.PutUint16(p[:], a.Port)
			out = netip.AddrPortFrom(netip.AddrFrom16(a.Addr), binary.BigEndian.Uint16(p[:])).String()
		}
	})
	return out
}

// topology is a pod netns and a peer netns on one veth pair.
type topology struct {
	pod, peer string
}

const (
	podIP4, peerIP4, peerSkip4 = "10.77.0.1", "10.77.0.2", "10.77.0.3"
	peerSkipOut                = "10.77.0.4" // an outbound-only skip
	podIP6, peerIP6            = "fd77::1", "fd77::2"
	appUID, proxyUID           = 1000, 2102
)

func newTopology(t *testing.T, name string) topology {
	tp := topology{pod: fmt.Sprintf("mesh-pod-%d-%s", os.Getpid(), name), peer: fmt.Sprintf("mesh-peer-%d-%s", os.Getpid(), name)}
	netns(t, tp.pod)
	netns(t, tp.peer)
	veth := fmt.Sprintf("mv%d", os.Getpid()%100000)
	for _, c := range [][]string{
		{"ip", "link", "add", veth, "netns", tp.pod, "type", "veth", "peer", "name", "eth0", "netns", tp.peer},
		{"ip", "-n", tp.pod, "link", "set", veth, "name", "eth0"},
		{"ip", "-n", tp.pod, "addr", "add", podIP4 + "/24", "dev", "eth0"},
		{"ip", "-n", tp.pod, "addr", "add", podIP6 + "/64", "dev", "eth0", "nodad"},
		{"ip", "-n", tp.peer, "addr", "add", peerIP4 + "/24", "dev", "eth0"},
		{"ip", "-n", tp.peer, "addr", "add", peerSkip4 + "/24", "dev", "eth0"},
		{"ip", "-n", tp.peer, "addr", "add", peerSkipOut + "/24", "dev", "eth0"},
		{"ip", "-n", tp.peer, "addr", "add", peerIP6 + "/64", "dev", "eth0", "nodad"},
		{"ip", "-n", tp.pod, "link", "set", "eth0", "up"},
		{"ip", "-n", tp.peer, "link", "set", "eth0", "up"},
		{"ip", "-n", tp.pod, "link", "set", "lo", "up"},
		{"ip", "-n", tp.peer, "link", "set", "lo", "up"},
	} {
		run(t, "", c...)
	}
	return tp
}

// apply programs rs into the pod netns with one renderer.
func (tp topology) apply(t *testing.T, rs RuleSet, renderer string) {
	switch renderer {
	case "nft":
		run(t, Nft(rs), "ip", "netns", "exec", tp.pod, "nft", "-f", "-")
	case "iptables":
		for _, f := range rs.Families {
			prog := map[Family]string{IPv4: "iptables-restore", IPv6: "ip6tables-restore"}[f]
			run(t, IptablesRestore(rs, f), "ip", "netns", "exec", tp.pod, prog, "--noflush")
		}
	}
	for _, pr := range rs.PolicyRoutes {
		for _, fam := range []string{"-4", "-6"} {
			run(t, "", "ip", fam, "-n", tp.pod, "rule", "add", "fwmark", fmt.Sprint(pr.Mark), "lookup", fmt.Sprint(pr.Table))
			run(t, "", "ip", fam, "-n", tp.pod, "route", "add", "local", "default", "dev", "lo", "table", fmt.Sprint(pr.Table))
		}
	}
}

// listen starts a helper listener in ns and waits until it is ready.
func listen(t *testing.T, ns string, uid int, transparent bool, reply string, addrs ...string) {
	t.Helper()
	arg := fmt.Sprintf("listen %d %v %s %s", uid, transparent, reply, strings.Join(addrs, " "))
	cmd := exec.Command("ip", "netns", "exec", ns, os.Args[0], "-test.run=^$", arg)
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("listener %q did not start: %q %v", arg, line, err)
	}
}

// dial connects from ns as uid and returns the answer (or the error text).
func dial(ns string, uid int, network, addr, src string) string {
	cmd := exec.Command("ip", "netns", "exec", ns, os.Args[0], "-test.run=^$", strings.TrimSpace(fmt.Sprintf("dial %d %s %s %s", uid, network, addr, src)))
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Sprintf("error: %v: %s", err, out)
	}
	return string(out)
}

type probe struct {
	what         string
	fromPeer     bool
	uid          int
	network, dst string
	want         string
	src          string // source address, optional
}

func checkProbes(t *testing.T, tp topology, probes []probe) {
	t.Helper()
	for _, p := range probes {
		ns := tp.pod
		if p.fromPeer {
			ns = tp.peer
		}
		got := dial(ns, p.uid, p.network, p.dst, p.src)
		if !strings.Contains(got, p.want) {
			t.Errorf("%s: %s %s from uid %d got %q, want %q", p.what, p.network, p.dst, p.uid, got, p.want)
		}
	}
}

func needTrafficTools(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root: it creates network namespaces and loads rules")
	}
}

// TestTrafficRedirect: REDIRECT mode, dual-stack, both renderers.
func TestTrafficRedirect(t *testing.T) {
	needTrafficTools(t)
	spec := linkerdSpec(dual)
	spec.IgnoreInbound = append(spec.IgnoreInbound, ports("9000")...)
	spec.IgnoreOutbound = ports("9999")
	spec.SkipSubnets = pfx(peerSkip4 + "/32")
	spec.SkipOutboundSubnets = pfx(peerSkipOut + "/32")
	for _, renderer := range []string{"nft", "iptables"} {
		t.Run(renderer, func(t *testing.T) {
			tp := newTopology(t, "r"+renderer[:1])
			tp.apply(t, Generate(spec), renderer)
			listen(t, tp.pod, proxyUID, false, "proxy", "tcp:[::]:4140", "tcp:[::]:4143")
			listen(t, tp.pod, appUID, false, "app", "tcp:[::]:9000", "tcp:[::]:8081")
			listen(t, tp.peer, 0, false, "peer", "tcp:[::]:80", "tcp:[::]:9999")
			checkProbes(t, tp, []probe{
				{"app outbound v4 lands at the proxy", false, appUID, "tcp", peerIP4 + ":80", "orig=" + peerIP4 + ":80", ""},
				{"app outbound v6 lands at the proxy", false, appUID, "tcp6", "[" + peerIP6 + "]:80", "orig=[" + peerIP6 + "]:80", ""},
				{"outbound skip port", false, appUID, "tcp", peerIP4 + ":9999", "peer", ""},
				// Linkerd's skip-subnets skips inbound sources only: the app's
				// connection to a skipped subnet still goes to the proxy.
				{"outbound to a skipped inbound source lands at the proxy", false, appUID, "tcp", peerSkip4 + ":80", "orig=" + peerSkip4 + ":80", ""},
				{"outbound skip subnet", false, appUID, "tcp", peerSkipOut + ":80", "peer", ""},
				{"proxy's own traffic does not loop", false, proxyUID, "tcp", peerIP4 + ":80", "peer", ""},
				{"proxy's own traffic does not loop v6", false, proxyUID, "tcp6", "[" + peerIP6 + "]:80", "peer", ""},
				{"inbound v4 lands at the inbound port", true, 0, "tcp", podIP4 + ":8080", "local=" + podIP4 + ":4143 orig=" + podIP4 + ":8080", ""},
				{"inbound v6 lands at the inbound port", true, 0, "tcp6", "[" + podIP6 + "]:8080", "orig=[" + podIP6 + "]:8080", ""},
				{"inbound ignore port reaches the app", true, 0, "tcp", podIP4 + ":9000", "app", ""},
				{"inbound app port is redirected", true, 0, "tcp", podIP4 + ":8081", "orig=" + podIP4 + ":8081", ""},
				{"inbound from a skipped subnet reaches the app", true, 0, "tcp", podIP4 + ":8081", "app", peerSkip4},
				{"app to its own pod IP stays local", false, appUID, "tcp", podIP4 + ":8081", "app", ""},
			})
		})
	}
}

// TestTrafficIstio: Istio's contract in REDIRECT and TPROXY mode: DNS
// capture, the proxy calling its own pod through the inbound port, the
// tunnel port left alone, and TPROXY keeping the original destination on
// the inbound socket.
func TestTrafficIstio(t *testing.T) {
	needTrafficTools(t)
	const istioUID = 1337
	for _, mode := range []Mode{Redirect, TProxy} {
		for _, renderer := range []string{"nft", "iptables"} {
			t.Run(string(mode)+"/"+renderer, func(t *testing.T) {
				spec := istioSpec(dual)
				spec.Mode, spec.CaptureDNS = mode, true
				spec.IgnoreOutbound = ports("5432")
				tp := newTopology(t, strings.ToLower(string(mode[:1]))+renderer[:1])
				tp.apply(t, Generate(spec), renderer)
				transparent := mode == TProxy
				listen(t, tp.pod, istioUID, transparent, "proxy", "tcp:[::]:15001", "tcp:[::]:15006")
				// Like Istio's DNS proxy, bound to loopback: an unconnected UDP
				// socket on a wildcard address would answer from the pod IP,
				// which conntrack cannot match to the redirected query.
				listen(t, tp.pod, istioUID, false, "dns", "udp4:127.0.0.1:15053", "udp6:[::1]:15053")
				listen(t, tp.pod, appUID, false, "app", "tcp:[::]:15008", "tcp:[::]:15021", "tcp:[::]:5432", "tcp:[::]:53")
				listen(t, tp.peer, 0, false, "peer", "tcp:[::]:80", "udp:[::]:53")
				inbound := "orig=" + podIP4 + ":8080" // REDIRECT: SO_ORIGINAL_DST
				inbound6 := "orig=[" + podIP6 + "]:8080"
				if mode == TProxy {
					inbound = "local=" + podIP4 + ":8080" // TPROXY: the socket keeps the destination
					inbound6 = "local=[" + podIP6 + "]:8080"
				}
				checkProbes(t, tp, []probe{
					{"app outbound lands at the proxy", false, appUID, "tcp", peerIP4 + ":80", "orig=" + peerIP4 + ":80", ""},
					{"app outbound v6 lands at the proxy", false, appUID, "tcp6", "[" + peerIP6 + "]:80", "orig=[" + peerIP6 + "]:80", ""},
					{"app DNS is captured", false, appUID, "udp", peerIP4 + ":53", "dns udp query", ""},
					{"app DNS v6 is captured", false, appUID, "udp6", "[" + peerIP6 + "]:53", "dns udp query", ""},
					{"proxy DNS is not captured", false, istioUID, "udp", peerIP4 + ":53", "peer udp query", ""},
					{"proxy's own traffic does not loop", false, istioUID, "tcp", peerIP4 + ":80", "peer", ""},
					{"inbound lands at the inbound port", true, 0, "tcp", podIP4 + ":8080", inbound, ""},
					{"inbound v6 lands at the inbound port", true, 0, "tcp6", "[" + podIP6 + "]:8080", inbound6, ""},
					{"excluded inbound port is not redirected", true, 0, "tcp", podIP4 + ":15021", "app", ""},
					{"proxy to its own pod goes inbound", false, istioUID, "tcp", podIP4 + ":8080", "local=", ""},
					// Istio's loopback rule skips the inbound port exclusions.
					{"proxy to its own pod, excluded inbound port, goes inbound", false, istioUID, "tcp", podIP4 + ":15021", "proxy local=", ""},
					{"proxy to its own pod v6, excluded inbound port, goes inbound", false, istioUID, "tcp6", "[" + podIP6 + "]:15021", "proxy local=", ""},
					{"app to its own pod, excluded outbound port, stays local", false, appUID, "tcp", podIP4 + ":5432", "app", ""},
				})
				// The ports Istio's loopback rule leaves out (outbound
				// excluded, tunnel, TCP DNS) go direct in REDIRECT mode. In
				// TPROXY mode the tunnel port is exempt in nat only, so
				// they reach the mangle chain and are tproxied like any
				// inbound connection.
				direct := map[Mode]string{Redirect: "app", TProxy: "proxy local="}[mode]
				checkProbes(t, tp, []probe{
					{"tunnel port", true, 0, "tcp", podIP4 + ":15008", direct, ""},
					{"proxy to its own pod, tunnel port", false, istioUID, "tcp", podIP4 + ":15008", direct, ""},
					{"proxy to its own pod, excluded outbound port", false, istioUID, "tcp", podIP4 + ":5432", direct, ""},
					{"proxy to its own pod v6, excluded outbound port", false, istioUID, "tcp6", "[" + podIP6 + "]:5432", direct, ""},
					{"proxy to its own pod, TCP DNS", false, istioUID, "tcp", podIP4 + ":53", direct, ""},
				})
			})
		}
	}
}

// TestTrafficKumaProxySelf: Kuma's proxy calling its own pod IP
// (pkg/transparentproxy/iptables/builder/builder_table_nat.go
// buildMeshOutbound at v2.14.3): the outbound port exclusions apply first,
// then every other TCP port goes to the inbound port, whatever the inbound
// port lists say; TCP DNS is not exempt (Kuma captures UDP only). An
// excludePortsForUIDs entry naming the proxy's UID is returned in OUTPUT
// before the jump to that chain (builder_table_nat.go:228-252, 308-316),
// so it reaches its own pod on that port directly.
func TestTrafficKumaProxySelf(t *testing.T) {
	needTrafficTools(t)
	const kumaUID = 5678
	spec := Spec{Mesh: "kuma", Families: dual, ProxyUID: kumaUID, ProxyGID: u32(kumaUID), InboundPort: 15006, OutboundPort: 15001,
		Mode: Redirect, InboundPorts: ports("8080", "5432"), IgnoreInbound: ports("9901", "8443"), IgnoreOutbound: ports("9901", "5432"),
		LoopbackToInbound: true, CaptureDNS: true, DNSPort: 15053, DNSUDPOnly: true, ExemptDNS: true,
		ExemptUIDs: []UIDExemption{{First: kumaUID, Last: kumaUID, Proto: TCP, Ports: ports("7070")}}}
	for _, renderer := range []string{"nft", "iptables"} {
		t.Run(renderer, func(t *testing.T) {
			tp := newTopology(t, "k"+renderer[:1])
			tp.apply(t, Generate(spec), renderer)
			listen(t, tp.pod, kumaUID, false, "proxy", "tcp:[::]:15001", "tcp:[::]:15006")
			listen(t, tp.pod, appUID, false, "app", "tcp:[::]:5432", "tcp:[::]:8443", "tcp:[::]:9090", "tcp:[::]:9901", "tcp:[::]:53", "tcp:[::]:7070")
			checkProbes(t, tp, []probe{
				{"proxy to its own pod, port its UID is excluded for", false, kumaUID, "tcp", podIP4 + ":7070", "app", ""},
				{"proxy to its own pod v6, port its UID is excluded for", false, kumaUID, "tcp6", "[" + podIP6 + "]:7070", "app", ""},
				{"inbound excluded port reaches the app", true, 0, "tcp", podIP4 + ":8443", "app", ""},
				{"inbound port not in the list reaches the app", true, 0, "tcp", podIP4 + ":9090", "app", ""},
				{"proxy to its own pod, excluded outbound port", false, kumaUID, "tcp", podIP4 + ":5432", "app", ""},
				{"proxy to its own pod v6, excluded outbound port", false, kumaUID, "tcp6", "[" + podIP6 + "]:5432", "app", ""},
				{"proxy to its own pod, admin port", false, kumaUID, "tcp", podIP4 + ":9901", "app", ""},
				{"proxy to its own pod, excluded inbound port", false, kumaUID, "tcp", podIP4 + ":8443", "proxy local=", ""},
				{"proxy to its own pod, port outside the inbound list", false, kumaUID, "tcp", podIP4 + ":9090", "proxy local=", ""},
				{"proxy to its own pod v6, port outside the inbound list", false, kumaUID, "tcp6", "[" + podIP6 + "]:9090", "proxy local=", ""},
				{"proxy to its own pod, TCP DNS", false, kumaUID, "tcp", podIP4 + ":53", "proxy local=", ""},
				{"app to its own pod stays local", false, appUID, "tcp", podIP4 + ":9090", "app", ""},
			})
		})
	}
}
