package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mesh-cni/mesh-cni/internal/node"
)

type options struct {
	outboundPort int
	sentinel     string
	ipv6         bool
	timeout      time.Duration
}

func parse(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("mesh-cni-validator", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.IntVar(&o.outboundPort, "outbound-port", 4140, "the proxy's outbound port the rules redirect to (Linkerd 4140, Istio 15001)")
	fs.StringVar(&o.sentinel, "sentinel", "", "address to connect to (default 192.0.2.1:20001, or [2001:db8::1]:20001 with --ipv6)")
	fs.BoolVar(&o.ipv6, "ipv6", false, "validate the IPv6 rules")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.outboundPort < 1 || o.outboundPort > 65535 {
		return o, fmt.Errorf("--outbound-port %d out of range", o.outboundPort)
	}
	if o.sentinel == "" {
		o.sentinel = "192.0.2.1:20001"
		if o.ipv6 {
			o.sentinel = "[2001:db8::1]:20001"
		}
	}
	if _, err := netip.ParseAddrPort(o.sentinel); err != nil {
		return o, fmt.Errorf("--sentinel: %w", err)
	}
	return o, nil
}

// run returns the exit code and a message saying why.
func run(args []string) (int, string) {
	o, err := parse(args)
	if err != nil {
		return 2, "mesh-cni-validator: " + err.Error()
	}
	if err := validate(o); err != nil {
		return node.ValidatorExitCode, fmt.Sprintf("mesh-cni-validator: outbound traffic is NOT redirected to port %d: %v "+
			"(is mesh-cni installed and ready on this node, and is this container running as a UID other than the proxy's?)", o.outboundPort, err)
	}
	return 0, fmt.Sprintf("mesh-cni-validator: outbound traffic to %s is redirected to port %d", o.sentinel, o.outboundPort)
}

func validate(o options) error {
	network, listen := "tcp4", fmt.Sprintf("0.0.0.0:%d", o.outboundPort)
	if o.ipv6 {
		network, listen = "tcp6", fmt.Sprintf("[::]:%d", o.outboundPort)
	}
	ln, err := net.Listen(network, listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", listen, err)
	}
	defer ln.Close()
	deadline := time.Now().Add(o.timeout)
	_ = ln.(*net.TCPListener).SetDeadline(deadline) // a failure shows as a timeout below

	token := make([]byte, 32)
	if _, err := rand.Read(token); err != nil {
		return err
	}
	want := []byte(hex.EncodeToString(token))
	got := make(chan error, 1)
	go func() { got <- serve(ln, want, o.sentinel, deadline) }()

	c, err := net.DialTimeout(network, o.sentinel, time.Until(deadline))
	if err != nil {
		return fmt.Errorf("connect to sentinel %s: %w", o.sentinel, err)
	}
	defer c.Close()
	_ = c.SetDeadline(deadline)
	if _, err := c.Write(want); err != nil {
		return fmt.Errorf("write to sentinel: %w", err)
	}
	_ = c.(*net.TCPConn).CloseWrite() // serve reads a bounded length
	return <-got
}

// serve accepts the redirected connection and checks it is ours.
func serve(ln net.Listener, want []byte, sentinel string, deadline time.Time) error {
	c, err := ln.Accept()
	if err != nil {
		return fmt.Errorf("the connection never reached port %s: %w", portOf(ln.Addr()), err)
	}
	defer c.Close()
	_ = c.SetDeadline(deadline)
	b, err := io.ReadAll(io.LimitReader(c, int64(len(want))+1))
	if err != nil {
		return fmt.Errorf("read redirected connection: %w", err)
	}
	if !bytes.Equal(b, want) {
		return errors.New("a connection reached the port but did not carry our token (another listener?)")
	}
	orig, err := originalDst(c.(*net.TCPConn))
	if err != nil {
		return fmt.Errorf("original destination of the redirected connection: %w", err)
	}
	if orig != sentinel {
		return fmt.Errorf("redirected connection reports original destination %s, want %s", orig, sentinel)
	}
	return nil
}

func portOf(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		return strconv.Itoa(t.Port)
	}
	return a.String()
}

// originalDst reads SO_ORIGINAL_DST, which NAT redirects (iptables
// REDIRECT and nftables redirect alike) keep for the proxy.
func originalDst(c *net.TCPConn) (string, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return "", err
	}
	var out string
	var serr error
	err = rc.Control(func(fd uintptr) {
		if la, ok := c.LocalAddr().(*net.TCPAddr); ok && la.IP.To4() == nil {
			var sa unix.RawSockaddrInet6
			l := uint32(unsafe.Sizeof(sa))
			_, _, e := syscall.Syscall6(syscall.SYS_GETSOCKOPT, fd, unix.SOL_IPV6, ip6tSoOriginalDst,
				uintptr(unsafe.Pointer(&sa)), uintptr(unsafe.Pointer(&l)), 0)
			if e != 0 {
				serr = e
				return
			}
			out = netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), netPort(&sa.Port)).String()
			return
		}
		var sa unix.RawSockaddrInet4
		l := uint32(unsafe.Sizeof(sa))
		_, _, e := syscall.Syscall6(syscall.SYS_GETSOCKOPT, fd, unix.SOL_IP, unix.SO_ORIGINAL_DST,
			uintptr(unsafe.Pointer(&sa)), uintptr(unsafe.Pointer(&l)), 0)
		if e != 0 {
			serr = e
			return
		}
		out = netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), netPort(&sa.Port)).String()
	})
	if err != nil {
		return "", err
	}
	return out, serr
}

// ip6tSoOriginalDst is IP6T_SO_ORIGINAL_DST from linux/netfilter_ipv6/ip6_tables.h.
const ip6tSoOriginalDst = 80

// netPort reads a port stored in network byte order.
func netPort(p *uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(p))
	return uint16(b[0])<<8 | uint16(b[1])
}
