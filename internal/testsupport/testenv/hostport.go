package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
)

// Host ports for servers in the host's network namespace are drawn below
// Linux's default ephemeral range (32768-60999), so no outgoing
// connection on the host can hold them, and each is checked free.
const hostPortLow, hostPortHigh = 20000, 32000

// HostPort returns a TCP and UDP port free on every host address, both
// families, for a test server in the host netns. Drawn at random and
// checked, so concurrent test binaries do not collide.
func HostPort(t testing.TB) int {
	t.Helper()
	for range 200 {
		p := hostPortLow + rand.IntN(hostPortHigh-hostPortLow)
		if hostPortFree(p) {
			return p
		}
	}
	t.Fatalf("no free host port in %d-%d", hostPortLow, hostPortHigh)
	return 0
}

func hostPortFree(p int) bool {
	var closers []func() error
	defer func() {
		for _, c := range closers {
			_ = c()
		}
	}()
	for _, nw := range []string{"tcp4", "tcp6"} {
		l, err := net.Listen(nw, fmt.Sprintf(":%d", p))
		if err != nil {
			return false
		}
		closers = append(closers, l.Close)
	}
	for _, nw := range []string{"udp4", "udp6"} {
		c, err := net.ListenPacket(nw, fmt.Sprintf(":%d", p))
		if err != nil {
			return false
		}
		closers = append(closers, c.Close)
	}
	return true
}
