package main

import (
	"net"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// originalDst reads the destination a connection had before REDIRECT:
// SO_ORIGINAL_DST for IPv4, IP6T_SO_ORIGINAL_DST (same number, SOL_IPV6)
// for IPv6.
func originalDst(c *net.TCPConn) (string, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return "", err
	}
	v6 := c.LocalAddr().(*net.TCPAddr).IP.To4() == nil
	var addr string
	var gerr error
	err = raw.Control(func(fd uintptr) {
		if v6 {
			var sa unix.RawSockaddrInet6
			size := uint32(unsafe.Sizeof(sa))
			gerr = getsockopt(fd, unix.SOL_IPV6, ip6tSoOriginalDst, unsafe.Pointer(&sa), &size)
			port := int(sa.Port>>8 | sa.Port<<8)
			addr = net.JoinHostPort(net.IP(sa.Addr[:]).String(), strconv.Itoa(port))
			return
		}
		var sa unix.RawSockaddrInet4
		size := uint32(unsafe.Sizeof(sa))
		gerr = getsockopt(fd, unix.SOL_IP, unix.SO_ORIGINAL_DST, unsafe.Pointer(&sa), &size)
		port := int(sa.Port>>8 | sa.Port<<8)
		addr = net.JoinHostPort(net.IP(sa.Addr[:]).String(), strconv.Itoa(port))
	})
	if err != nil {
		return "", err
	}
	return addr, gerr
}

func getsockopt(fd uintptr, level, name int, p unsafe.Pointer, size *uint32) error {
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, uintptr(level), uintptr(name), uintptr(p), uintptr(unsafe.Pointer(size)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// ip6tSoOriginalDst is IP6T_SO_ORIGINAL_DST from linux/netfilter_ipv6/ip6_tables.h.
const ip6tSoOriginalDst = 80
