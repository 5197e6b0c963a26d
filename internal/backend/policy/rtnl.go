package policy

// The few rtnetlink messages policy needs: ip rules (add, delete, dump),
// routes (replace, delete, dump) and the loopback link (get, set up), built
// by hand on github.com/mdlayher/netlink. The header layouts are the
// kernel's struct rtmsg / fib_rule_hdr (12 bytes) and struct ifinfomsg (16
// bytes), in native byte order.

import (
	"errors"
	"fmt"
	"os"

	"github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nlenc"
	"golang.org/x/sys/unix"
)

type conn struct{ *netlink.Conn }

// dial opens an rtnetlink socket inside the netns ns; the calling thread's
// own netns is left as it was.
func dial(ns *os.File) (*conn, error) {
	c, err := netlink.Dial(unix.NETLINK_ROUTE, &netlink.Config{NetNS: int(ns.Fd())})
	if err != nil {
		return nil, fmt.Errorf("netlink in netns: %w", err)
	}
	if c == nil { // a dependency breaking its contract fails the verb, no later panic
		return nil, errors.New("netlink in netns: no connection and no error")
	}
	return &conn{c}, nil
}

// errno returns the kernel's errno of a failed request as such ("file
// exists", not "netlink receive: file exists"), so errors read as before
// and errors.Is still matches.
func errno(err error) error {
	var oe *netlink.OpError
	if errors.As(err, &oe) {
		var en unix.Errno
		if errors.As(oe.Err, &en) {
			if oe.Message != "" {
				return fmt.Errorf("%w (%s)", en, oe.Message)
			}
			return en
		}
	}
	return err
}

// do sends one request and waits for its acknowledgement.
func (c *conn) do(typ netlink.HeaderType, flags netlink.HeaderFlags, data []byte) error {
	_, err := c.Execute(netlink.Message{
		Header: netlink.Header{Type: typ, Flags: netlink.Request | netlink.Acknowledge | flags},
		Data:   data,
	})
	return errno(err)
}

// dump runs a dump request and returns its answers. A dump the kernel
// marks as interrupted (the table changed under it) is run again.
func (c *conn) dump(typ netlink.HeaderType, data []byte) ([]netlink.Message, error) {
	for try := 0; ; try++ {
		msgs, err := c.Execute(netlink.Message{
			Header: netlink.Header{Type: typ, Flags: netlink.Request | netlink.Dump},
			Data:   data,
		})
		if err != nil {
			return nil, errno(err)
		}
		intr := false
		for _, m := range msgs {
			if m.Header.Flags&netlink.DumpInterrupted != 0 {
				intr = true
			}
		}
		if !intr {
			return msgs, nil
		}
		if try == 2 {
			return nil, errors.New("dump interrupted three times")
		}
	}
}

// rtmsg is struct rtmsg; for ip rules the same bytes are struct
// fib_rule_hdr (protocol, scope, typ are res1, res2, action there).
type rtmsg struct {
	family, dstLen, srcLen, tos, table, protocol, scope, typ uint8
	flags                                                    uint32
}

const sizeofRtmsg = 12

func (h rtmsg) marshal() []byte {
	b := make([]byte, sizeofRtmsg)
	b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7] = h.family, h.dstLen, h.srcLen, h.tos, h.table, h.protocol, h.scope, h.typ
	nlenc.PutUint32(b[8:12], h.flags)
	return b
}

func parseRtmsg(b []byte) (rtmsg, []byte, error) {
	if len(b) < sizeofRtmsg {
		return rtmsg{}, nil, fmt.Errorf("short rtnetlink message (%d bytes)", len(b))
	}
	h := rtmsg{family: b[0], dstLen: b[1], srcLen: b[2], tos: b[3], table: b[4], protocol: b[5], scope: b[6], typ: b[7],
		flags: nlenc.Uint32(b[8:12])}
	return h, b[sizeofRtmsg:], nil
}

// headerTable is the table as the 8-bit header field carries it: tables
// from 256 up go in the TABLE attribute only.
func headerTable(t uint32) uint8 {
	if t >= 256 {
		return unix.RT_TABLE_UNSPEC
	}
	return uint8(t)
}

// rule is one ip rule, as much of it as ours use.
type rule struct {
	family   uint8
	tos      uint8
	table    uint32
	priority uint32
	mark     uint32
	mask     uint32
	hasMask  bool
	protocol uint8
	invert   bool
}

const fibRuleInvert = 0x2

// marshal builds the request for RTM_NEWRULE (create) or RTM_DELRULE. A
// new rule leaves its priority to the kernel (the next free one above
// "from all lookup local"); a rule being deleted is named with the
// priority the dump gave it.
func (r rule) marshal(create bool) ([]byte, error) {
	h := rtmsg{family: r.family, tos: r.tos, table: headerTable(r.table), protocol: unix.RTPROT_BOOT, scope: unix.RT_SCOPE_UNIVERSE}
	if create {
		h.typ = unix.FR_ACT_TO_TBL
	}
	if r.invert {
		h.flags |= fibRuleInvert
	}
	ae := netlink.NewAttributeEncoder()
	if !create {
		ae.Uint32(unix.FRA_PRIORITY, r.priority)
	}
	if r.mark != 0 || r.hasMask {
		ae.Uint32(unix.FRA_FWMARK, r.mark)
	}
	if r.hasMask {
		ae.Uint32(unix.FRA_FWMASK, r.mask)
	}
	if r.table >= 256 {
		ae.Uint32(unix.FRA_TABLE, r.table)
	}
	if r.protocol != 0 {
		ae.Uint8(unix.FRA_PROTOCOL, r.protocol)
	}
	attrs, err := ae.Encode()
	if err != nil {
		return nil, err
	}
	return append(h.marshal(), attrs...), nil
}

func (c *conn) ruleAdd(r rule) error {
	b, err := r.marshal(true)
	if err != nil {
		return err
	}
	return c.do(unix.RTM_NEWRULE, netlink.Create|netlink.Excl, b)
}

func (c *conn) ruleDel(r rule) error {
	b, err := r.marshal(false)
	if err != nil {
		return err
	}
	return c.do(unix.RTM_DELRULE, 0, b)
}

// ruleList dumps the ip rules of every family.
func (c *conn) ruleList() ([]rule, error) {
	msgs, err := c.dump(unix.RTM_GETRULE, rtmsg{family: unix.AF_UNSPEC}.marshal())
	if err != nil {
		return nil, err
	}
	var out []rule
	for _, m := range msgs {
		if m.Header.Type != unix.RTM_NEWRULE {
			continue
		}
		h, attrs, err := parseRtmsg(m.Data)
		if err != nil {
			return nil, err
		}
		r := rule{family: h.family, tos: h.tos, table: uint32(h.table), invert: h.flags&fibRuleInvert != 0}
		ad, err := netlink.NewAttributeDecoder(attrs)
		if err != nil {
			return nil, err
		}
		for ad.Next() {
			switch ad.Type() {
			case unix.FRA_TABLE:
				r.table = ad.Uint32()
			case unix.FRA_PRIORITY:
				r.priority = ad.Uint32()
			case unix.FRA_FWMARK:
				r.mark = ad.Uint32()
			case unix.FRA_FWMASK:
				r.mask, r.hasMask = ad.Uint32(), true
			case unix.FRA_PROTOCOL:
				r.protocol = ad.Uint8()
			}
		}
		if err := ad.Err(); err != nil {
			return nil, fmt.Errorf("decode ip rule: %w", err)
		}
		out = append(out, r)
	}
	return out, nil
}

// route is one route, as much of it as ours use.
type route struct {
	family   uint8
	dstLen   uint8
	tos      uint8
	table    uint32
	protocol uint8
	scope    uint8
	typ      uint8
	flags    uint32
	dst      []byte // nil: no RTA_DST
	oif      uint32
	priority uint32
}

// marshal builds the request for RTM_NEWROUTE or RTM_DELROUTE.
func (rt route) marshal() ([]byte, error) {
	h := rtmsg{family: rt.family, dstLen: rt.dstLen, tos: rt.tos, table: headerTable(rt.table), protocol: rt.protocol,
		scope: rt.scope, typ: rt.typ, flags: rt.flags}
	ae := netlink.NewAttributeEncoder()
	if rt.dst != nil {
		ae.Bytes(unix.RTA_DST, rt.dst)
	}
	if rt.table >= 256 {
		ae.Uint32(unix.RTA_TABLE, rt.table)
	}
	if rt.priority > 0 {
		ae.Uint32(unix.RTA_PRIORITY, rt.priority)
	}
	ae.Uint32(unix.RTA_OIF, rt.oif)
	attrs, err := ae.Encode()
	if err != nil {
		return nil, err
	}
	return append(h.marshal(), attrs...), nil
}

// routeReplace is "ip route replace": create, or overwrite the route with
// the same destination in the same table.
func (c *conn) routeReplace(rt route) error {
	b, err := rt.marshal()
	if err != nil {
		return err
	}
	return c.do(unix.RTM_NEWROUTE, netlink.Create|netlink.Replace, b)
}

func (c *conn) routeDel(rt route) error {
	b, err := rt.marshal()
	if err != nil {
		return err
	}
	return c.do(unix.RTM_DELROUTE, 0, b)
}

// routeList dumps the routes of family af in every table, without the
// cached (cloned) ones.
func (c *conn) routeList(af uint8) ([]route, error) {
	msgs, err := c.dump(unix.RTM_GETROUTE, rtmsg{family: af}.marshal())
	if err != nil {
		return nil, err
	}
	var out []route
	for _, m := range msgs {
		if m.Header.Type != unix.RTM_NEWROUTE {
			continue
		}
		h, attrs, err := parseRtmsg(m.Data)
		if err != nil {
			return nil, err
		}
		if h.family != af || h.flags&unix.RTM_F_CLONED != 0 {
			continue
		}
		rt := route{family: h.family, dstLen: h.dstLen, tos: h.tos, table: uint32(h.table), protocol: h.protocol,
			scope: h.scope, typ: h.typ, flags: h.flags}
		ad, err := netlink.NewAttributeDecoder(attrs)
		if err != nil {
			return nil, err
		}
		for ad.Next() {
			switch ad.Type() {
			case unix.RTA_TABLE:
				rt.table = ad.Uint32()
			case unix.RTA_DST:
				rt.dst = ad.Bytes()
			case unix.RTA_OIF:
				rt.oif = ad.Uint32()
			case unix.RTA_PRIORITY:
				rt.priority = ad.Uint32()
			}
		}
		if err := ad.Err(); err != nil {
			return nil, fmt.Errorf("decode route: %w", err)
		}
		if rt.dst == nil {
			// The kernel omits the destination of a default route; name
			// it, as "ip route del" does.
			rt.dst = make([]byte, addrLen(af))
		}
		out = append(out, rt)
	}
	return out, nil
}

// link is the part of struct ifinfomsg policy reads.
type link struct {
	index int32
	flags uint32
}

const sizeofIfinfomsg = 16

func ifinfomsg(index int32, flags, change uint32) []byte {
	b := make([]byte, sizeofIfinfomsg) // family AF_UNSPEC, type 0
	nlenc.PutInt32(b[4:8], index)
	nlenc.PutUint32(b[8:12], flags)
	nlenc.PutUint32(b[12:16], change)
	return b
}

func (c *conn) linkByName(name string) (link, error) {
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.IFLA_IFNAME, name)
	attrs, err := ae.Encode()
	if err != nil {
		return link{}, err
	}
	msgs, err := c.Execute(netlink.Message{
		Header: netlink.Header{Type: unix.RTM_GETLINK, Flags: netlink.Request},
		Data:   append(ifinfomsg(0, 0, 0), attrs...),
	})
	if err != nil {
		return link{}, fmt.Errorf("link %s: %w", name, errno(err))
	}
	for _, m := range msgs {
		if m.Header.Type == unix.RTM_NEWLINK && len(m.Data) >= sizeofIfinfomsg {
			return link{index: nlenc.Int32(m.Data[4:8]), flags: nlenc.Uint32(m.Data[8:12])}, nil
		}
	}
	return link{}, fmt.Errorf("link %s: no answer", name)
}

func (c *conn) linkSetUp(index int32) error {
	return c.do(unix.RTM_NEWLINK, 0, ifinfomsg(index, unix.IFF_UP, unix.IFF_UP))
}
