package nftables

import (
	"fmt"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// A transaction is one netlink batch, and the kernel takes a batch only in
// one sendmsg: netlink refuses a message longer than the socket's send
// buffer (EMSGSIZE, netlink_sendmsg in net/netlink/af_netlink.c). It
// processes the whole batch inside that sendmsg and queues an
// acknowledgement (and, for a rule, its echo) per message before the first
// is read, so the receive buffer must hold them all, or the kernel drops
// them and the read fails with ENOBUFS after the batch was committed. The
// defaults (net.core.wmem_default and rmem_default, 208 KiB) hold about
// 160 rules. Rather than split the batch, which would give up its
// atomicity, each transaction's socket gets buffers sized to its batch.
// These are limits, not allocations: the kernel charges what is queued.
const (
	// maxExprBytes bounds one expression's netlink encoding (the largest
	// of ours, a bitwise on an IPv6 address with mask and xor, is ~100).
	maxExprBytes = 256
	// maxElemBytes bounds one set element (an IPv6 key with its flags).
	maxElemBytes = 128
	// msgBytes is a message's own overhead: headers, table, chain and set
	// names, and on receipt the socket-buffer truesize of its
	// acknowledgement and echo.
	msgBytes = 4 << 10
	// minBuffer is where sizing starts: the kernel's default, and room
	// for what a small batch needs without any arithmetic.
	minBuffer = 1 << 20
	// maxBuffer is far beyond any rule set the annotation caps allow
	// (internal/mesh.Limits); the setsockopt takes an int.
	maxBuffer = 1 << 30
)

// batchSize counts a batch's messages and the bytes of their contents.
type batchSize struct{ msgs, bytes int }

func (s *batchSize) add(msgs, bytes int) {
	s.msgs += msgs
	s.bytes += bytes
}

// buffer is the socket buffer one direction needs for the batch.
func (s batchSize) buffer() int {
	return min(minBuffer+s.msgs*msgBytes+s.bytes, maxBuffer)
}

// fit sizes the socket's buffers for the batch. SO_SNDBUFFORCE and
// SO_RCVBUFFORCE go past net.core.[wr]mem_max; they need CAP_NET_ADMIN,
// which writing rules needs anyway. Without it, the plain options (capped
// by the sysctls) are the best there is.
func (s batchSize) fit(c *netlink.Conn) error {
	if c == nil {
		return fmt.Errorf("nftables netlink: socket not open")
	}
	n := s.buffer()
	sc, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("nftables netlink: %w", err)
	}
	var serr error
	err = sc.Control(func(fd uintptr) {
		for _, o := range [][2]int{{unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}, {unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}} {
			if e := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o[0], n); e != nil {
				if e = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o[1], n); e != nil && serr == nil {
					serr = e
				}
			}
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("nftables netlink: size socket buffers to %d bytes: %w", n, err)
	}
	return nil
}
