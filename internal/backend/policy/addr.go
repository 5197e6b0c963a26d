package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"os"

	"github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nlenc"
	"golang.org/x/sys/unix"
)

// AddLoopbackAddrs adds addrs to the netns's lo (ip addr add ... dev lo);
// an address already there is fine. They are not removed on DEL: the
// mesh's own plugin never removes them, and they go with the netns.
func AddLoopbackAddrs(ns *os.File, addrs []netip.Prefix) error {
	return onLoopback(ns, addrs, func(c *conn, lo link) error {
		for _, a := range addrs {
			if err := c.addrAdd(lo.index, a); err != nil && !errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("add %s to lo: %w", a, err)
			}
		}
		return nil
	})
}

// HasLoopbackAddrs names the first of addrs lo does not hold.
func HasLoopbackAddrs(ns *os.File, addrs []netip.Prefix) error {
	return onLoopback(ns, addrs, func(c *conn, lo link) error {
		msgs, err := c.dump(unix.RTM_GETADDR, ifaddrmsg(unix.AF_UNSPEC, 0, 0))
		if err != nil {
			return fmt.Errorf("list addresses: %w", err)
		}
		have := map[netip.Prefix]bool{}
		for _, m := range msgs {
			if p, ok := parseAddr(m, lo.index); ok {
				have[p] = true
			}
		}
		for _, a := range addrs {
			if !have[a] {
				return fmt.Errorf("address %s on lo is missing", a)
			}
		}
		return nil
	})
}

// onLoopback runs f with rtnetlink in the netns and its lo; nothing to do
// without addrs.
func onLoopback(ns *os.File, addrs []netip.Prefix, f func(c *conn, lo link) error) error {
	if len(addrs) == 0 {
		return nil
	}
	c, err := dial(ns)
	if err != nil {
		return err
	}
	defer c.Close()
	lo, err := c.linkByName("lo")
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	return f(c, lo)
}

// ifaddrmsg is struct ifaddrmsg (8 bytes): family, prefix length, flags,
// scope, interface index.
func ifaddrmsg(family, bits uint8, index int32) []byte {
	b := make([]byte, 8)
	b[0], b[1], b[3] = family, bits, unix.RT_SCOPE_HOST
	nlenc.PutInt32(b[4:8], index)
	return b
}

func (c *conn) addrAdd(index int32, p netip.Prefix) error {
	af := uint8(unix.AF_INET)
	if p.Addr().Is6() {
		af = unix.AF_INET6
	}
	ae := netlink.NewAttributeEncoder()
	ae.Bytes(unix.IFA_LOCAL, p.Addr().AsSlice())
	ae.Bytes(unix.IFA_ADDRESS, p.Addr().AsSlice())
	attrs, err := ae.Encode()
	if err != nil {
		return err
	}
	return c.do(unix.RTM_NEWADDR, netlink.Create|netlink.Excl, append(ifaddrmsg(af, uint8(p.Bits()), index), attrs...))
}

// parseAddr reads one RTM_NEWADDR answer of interface index.
func parseAddr(m netlink.Message, index int32) (netip.Prefix, bool) {
	if m.Header.Type != unix.RTM_NEWADDR || len(m.Data) < 8 || nlenc.Int32(m.Data[4:8]) != index {
		return netip.Prefix{}, false
	}
	bits := int(m.Data[1])
	ad, err := netlink.NewAttributeDecoder(m.Data[8:])
	if err != nil {
		return netip.Prefix{}, false
	}
	for ad.Next() {
		if ad.Type() == unix.IFA_ADDRESS || ad.Type() == unix.IFA_LOCAL {
			if a, ok := netip.AddrFromSlice(ad.Bytes()); ok {
				return netip.PrefixFrom(a, bits), true
			}
		}
	}
	return netip.Prefix{}, false
}

// Addrs lists every address of every interface in the netns ns (one
// RTM_GETADDR dump; nothing is changed).
func Addrs(ns *os.File) ([]netip.Addr, error) {
	c, err := dial(ns)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	msgs, err := c.dump(unix.RTM_GETADDR, ifaddrmsg(unix.AF_UNSPEC, 0, 0))
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	var out []netip.Addr
	for _, m := range msgs {
		if len(m.Data) < 8 {
			continue
		}
		if p, ok := parseAddr(m, nlenc.Int32(m.Data[4:8])); ok {
			out = append(out, p.Addr())
		}
	}
	return out, nil
}
