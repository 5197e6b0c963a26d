package rules

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// TestTrafficTProxyNoProxy: in TPROXY mode, while no proxy listens on the
// inbound port, a connection to a port the app listens on must not reach the
// app, with either renderer and in both families: iptables' TPROXY drops
// it, and nft's tproxy, which is not terminal, is followed by a drop.
//
// A dropped SYN is seen when the peer sends it again (unanswered): the
// connection attempt is still SYN_SENT after TCP's first retransmission
// timeout (1 s), which no answer from a netns one veth away misses, however
// busy the machine; waiting out a dial's timeout instead would prove the
// same in 60 s. The renderers and both families run in parallel.
func TestTrafficTProxyNoProxy(t *testing.T) {
	needTrafficTools(t)
	for _, renderer := range []string{"nft", "iptables"} {
		t.Run(renderer, func(t *testing.T) {
			t.Parallel()
			spec := istioSpec(dual)
			spec.Mode = TProxy
			tp := newTopology(t, "n"+renderer[:1])
			listen(t, tp.pod, appUID, false, "app", "tcp:[::]:8080", "tcp:[::]:15021")
			checkProbes(t, tp, []probe{
				{"before: inbound reaches the app", true, 0, "tcp", podIP4 + ":8080", "app", ""},
				{"before: inbound v6 reaches the app", true, 0, "tcp6", "[" + podIP6 + "]:8080", "app", ""},
			})
			tp.apply(t, Generate(spec), renderer)
			noProxy := []probe{
				{"no proxy: inbound does not reach the app", true, 0, "tcp", podIP4 + ":8080", "", ""},
				{"no proxy: inbound v6 does not reach the app", true, 0, "tcp6", "[" + podIP6 + "]:8080", "", ""},
			}
			got := make([]string, len(noProxy))
			var wg sync.WaitGroup
			for i, p := range noProxy {
				wg.Go(func() { got[i] = tryConnect(tp.peer, p.network, p.dst) })
			}
			wg.Wait()
			for i, p := range noProxy {
				if got[i] != "unanswered" && got[i] != "refused" {
					t.Errorf("%s: %s %s got %q, want the SYN unanswered or refused", p.what, p.network, p.dst, got[i])
				}
			}
			checkProbes(t, tp, []probe{
				{"excluded inbound port still reaches the app", true, 0, "tcp", podIP4 + ":15021", "app", ""},
			})
		})
	}
}

const tcpSynSent = 2 // TCP_SYN_SENT, include/net/tcp_states.h

// tryConnect runs the helper "unanswered" in ns (as root) and returns what
// it printed, or the error text.
func tryConnect(ns, network, addr string) string {
	cmd := exec.Command("ip", "netns", "exec", ns, os.Args[0], "-test.run=^$", fmt.Sprintf("unanswered 0 %s %s", network, addr))
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Sprintf("error: %v: %s", err, out)
	}
	return string(out)
}

// unanswered starts a TCP connection to addr and says how the attempt
// ends: "connected", "refused" (a reset), or "unanswered" once the SYN has
// been sent again (still SYN_SENT after the retransmission timeout, so no
// answer came back). It gives up after the shared scaled timeout.
func unanswered(network, addr string) (string, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return "", err
	}
	family, sa := unix.AF_INET6, unix.Sockaddr(&unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()})
	if network == "tcp" {
		family, sa = unix.AF_INET, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().Unmap().As4()}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, sa); err != nil && !errors.Is(err, unix.EINPROGRESS) {
		return "", fmt.Errorf("connect %s: %w", addr, err)
	}
	deadline := time.Now().Add(testenv.Timeout())
	for time.Now().Before(deadline) {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		if _, err := unix.Poll(pfd, 10); err != nil && !errors.Is(err, unix.EINTR) {
			return "", fmt.Errorf("poll: %w", err)
		}
		if pfd[0].Revents != 0 { // the attempt has ended
			switch serr, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); unix.Errno(serr) {
			case 0:
				return "connected", nil
			case unix.ECONNREFUSED:
				return "refused", nil
			default:
				return "", fmt.Errorf("connect %s: %w", addr, unix.Errno(serr))
			}
		}
		info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			return "", fmt.Errorf("TCP_INFO: %w", err)
		}
		if info.State == tcpSynSent && info.Retransmits > 0 {
			return "unanswered", nil
		}
	}
	return "", fmt.Errorf("connect %s: neither answered nor sent again in %v", addr, testenv.Timeout())
}
