package main

// UDP: the DNS port. Each answer must leave from the address the query was
// sent to, so the listener reads each datagram's destination.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

func (s *server) listenUDP(role string, port int) error {
	lc := net.ListenConfig{Control: s.control}
	for _, network := range []string{"udp4", "udp6"} {
		pc, err := lc.ListenPacket(context.Background(), network, net.JoinHostPort("", strconv.Itoa(port)))
		if err != nil {
			if network == "udp6" && errors.Is(err, unix.EAFNOSUPPORT) {
				continue
			}
			return fmt.Errorf("%s listen %s port %d: %w", role, network, port, err)
		}
		go s.serveUDP(pc, network, role, port)
	}
	return nil
}

// serveUDP answers each datagram from the address it was sent to
// (IP_PKTINFO): after a REDIRECT that is the loopback address conntrack
// expects the reply from, not the one routing would pick.
func (s *server) serveUDP(pc net.PacketConn, network, role string, port int) {
	type packetConn interface {
		ReadFrom([]byte) (int, net.Addr, net.IP, error)
		WriteTo([]byte, net.IP, net.Addr) error
	}
	var c packetConn
	if network == "udp6" {
		p := ipv6.NewPacketConn(pc)
		_ = p.SetControlMessage(ipv6.FlagDst, true)
		c = v6conn{p}
	} else {
		p := ipv4.NewPacketConn(pc)
		_ = p.SetControlMessage(ipv4.FlagDst, true)
		c = v4conn{p}
	}
	buf := make([]byte, 2048)
	for {
		_, peer, dst, err := c.ReadFrom(buf)
		if err != nil {
			return
		}
		r := Record{Name: s.name, Role: role, Port: port, Proto: "udp", Peer: peer.String(), UID: os.Getuid()}
		if dst != nil {
			r.Orig, r.Source = net.JoinHostPort(dst.String(), strconv.Itoa(port)), "local"
		}
		_ = c.WriteTo(s.log(r), dst, peer)
	}
}

type v4conn struct{ *ipv4.PacketConn }

func (c v4conn) ReadFrom(b []byte) (int, net.Addr, net.IP, error) {
	n, cm, peer, err := c.PacketConn.ReadFrom(b)
	if cm == nil {
		return n, peer, nil, err
	}
	return n, peer, cm.Dst, err
}

func (c v4conn) WriteTo(b []byte, src net.IP, to net.Addr) error {
	_, err := c.PacketConn.WriteTo(b, &ipv4.ControlMessage{Src: src}, to)
	return err
}

type v6conn struct{ *ipv6.PacketConn }

func (c v6conn) ReadFrom(b []byte) (int, net.Addr, net.IP, error) {
	n, cm, peer, err := c.PacketConn.ReadFrom(b)
	if cm == nil {
		return n, peer, nil, err
	}
	return n, peer, cm.Dst, err
}

func (c v6conn) WriteTo(b []byte, src net.IP, to net.Addr) error {
	_, err := c.PacketConn.WriteTo(b, &ipv6.ControlMessage{Src: src}, to)
	return err
}
