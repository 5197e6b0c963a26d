package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// connect is the app side of a test: one dial, the proxy's answer printed.
func connect(args []string) error {
	fs := flag.NewFlagSet("connect", flag.ContinueOnError)
	udp := fs.Bool("udp", false, "send one UDP datagram and print the answer")
	timeout := fs.Duration("timeout", 3*time.Second, "dial and read timeout")
	source := fs.String("source", "", "local address to bind (as Kuma's validation client binds ::1)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("connect needs one HOST:PORT")
	}
	network := "tcp"
	if *udp {
		network = "udp"
	}
	d := net.Dialer{Timeout: *timeout}
	if *source != "" {
		ip := net.ParseIP(*source)
		if ip == nil {
			return fmt.Errorf("bad -source %q", *source)
		}
		if *udp {
			d.LocalAddr = &net.UDPAddr{IP: ip}
		} else {
			d.LocalAddr = &net.TCPAddr{IP: ip}
		}
	}
	c, err := d.Dial(network, fs.Arg(0))
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(*timeout))
	if *udp {
		if _, err := c.Write([]byte("query\n")); err != nil {
			return err
		}
		buf := make([]byte, 2048)
		n, err := c.Read(buf)
		if err != nil {
			return err
		}
		_, err = os.Stdout.Write(buf[:n])
		return err
	}
	_, err = io.Copy(os.Stdout, c)
	return err
}
