// Command testproxy stands in for a mesh proxy in tests. "serve" listens on
// the outbound, inbound and DNS ports (and plain app ports), reads the
// original destination of each connection, logs one JSON line per
// connection and answers the client with the same line. "connect" is the
// app side: it dials an address and prints the answer. "stream" is a
// long-lived app client: one connection, a message every interval, its
// counters printed as JSON lines (stream.go); for it the proxy relays
// (-relay) and the far end echoes (-echo) after their records. "proxyv2" is
// the entrypoint of an image that stands in for Istio's proxyv2 image (see
// proxyv2.go).
//
//	testproxy serve -name proxy -outbound 15001 -inbound 15006 -dns 15053 [-health 15021] [-tproxy] [-relay] [-log FILE] [-ready FILE]
//	testproxy serve -name peer -ports 8080,9090 [-echo]
//	testproxy connect [-udp] [-timeout 3s] HOST:PORT
//	testproxy stream [-interval 100ms] [-timeout 5s] [-report 1s] [-setup 1m] HOST:PORT
//	testproxy proxyv2 ARGS...
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Record is what the proxy logs and answers for each connection.
type Record struct {
	Name  string `json:"name"`
	Role  string `json:"role"` // outbound, inbound, dns, app
	Port  int    `json:"port"` // the listener's port
	Proto string `json:"proto"`
	Peer  string `json:"peer"`
	// Orig is the original destination: SO_ORIGINAL_DST (IP6T_SO_ORIGINAL_DST)
	// after a REDIRECT, else the socket's local address (TPROXY, direct).
	Orig   string `json:"orig,omitempty"`
	Source string `json:"source,omitempty"` // original_dst or local
	UID    int    `json:"uid"`
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testproxy serve|connect|stream|proxyv2 ...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "connect":
		err = connect(os.Args[2:])
	case "stream":
		err = stream(os.Args[2:], os.Stdout)
	case "proxyv2":
		err = proxyv2(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testproxy:", err)
		os.Exit(1)
	}
}

type server struct {
	name   string
	tproxy bool
	relay  bool // after the record, relay a redirected connection to its original destination
	echo   bool // after the record, echo what the client sends
	mu     sync.Mutex
	out    []io.Writer
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	s := &server{}
	fs.StringVar(&s.name, "name", "proxy", "name reported in each record")
	outbound := fs.Int("outbound", 0, "outbound port")
	inbound := fs.Int("inbound", 0, "inbound port")
	dns := fs.Int("dns", 0, "DNS port (TCP and UDP)")
	ports := fs.String("ports", "", "comma-separated plain app ports")
	fs.BoolVar(&s.tproxy, "tproxy", false, "IP_TRANSPARENT listeners (TPROXY)")
	fs.BoolVar(&s.relay, "relay", false, "after the record, relay each redirected TCP connection to its original destination (as a proxy does)")
	fs.BoolVar(&s.echo, "echo", false, "after the record, echo what the client sends until it closes (TCP)")
	logFile := fs.String("log", "", "also append records to this file")
	ready := fs.String("ready", "", "create this file once listening")
	health := fs.Int("health", 0, "HTTP port answering 200 to every GET (a readiness probe)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	s.out = []io.Writer{os.Stdout}
	if *logFile != "" {
		f, err := os.OpenFile(*logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		s.out = append(s.out, f)
	}
	roles := map[string]int{"outbound": *outbound, "inbound": *inbound, "dns": *dns}
	var apps []int
	for _, p := range strings.Split(*ports, ",") {
		if p == "" {
			continue
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			return fmt.Errorf("bad port %q", p)
		}
		apps = append(apps, n)
	}
	for role, port := range roles {
		if port != 0 {
			if err := s.listenTCP(role, port); err != nil {
				return err
			}
		}
	}
	for _, port := range apps {
		if err := s.listenTCP("app", port); err != nil {
			return err
		}
	}
	if *dns != 0 {
		if err := s.listenUDP("dns", *dns); err != nil {
			return err
		}
	}
	if *health != 0 {
		if err := listenHealth(*health); err != nil {
			return err
		}
	}
	if *ready != "" {
		if err := os.WriteFile(*ready, []byte("ok\n"), 0o644); err != nil {
			return err
		}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	return nil
}

func (s *server) control(network, _ string, c syscall.RawConn) error {
	if !s.tproxy {
		return nil
	}
	var serr error
	err := c.Control(func(fd uintptr) {
		if strings.HasSuffix(network, "6") {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_IPV6, unix.IPV6_TRANSPARENT, 1)
		} else {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_TRANSPARENT, 1)
		}
	})
	if err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("IP_TRANSPARENT: %w", serr)
	}
	return nil
}

// listenTCP listens on port in both families; IPv6 is optional (a host
// without it just has no IPv6 listener).
func (s *server) listenTCP(role string, port int) error {
	lc := net.ListenConfig{Control: s.control}
	for _, network := range []string{"tcp4", "tcp6"} {
		l, err := lc.Listen(context.Background(), network, net.JoinHostPort("", strconv.Itoa(port)))
		if err != nil {
			if network == "tcp6" && errors.Is(err, unix.EAFNOSUPPORT) {
				continue
			}
			return fmt.Errorf("%s listen %s port %d: %w", role, network, port, err)
		}
		go s.accept(l, role, port)
	}
	return nil
}

// listenHealth answers 200 "ok" to every HTTP request on port, in both
// families where the host has them, for a kubelet probe.
func listenHealth(port int) error {
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	for _, network := range []string{"tcp4", "tcp6"} {
		l, err := net.Listen(network, net.JoinHostPort("", strconv.Itoa(port)))
		if err != nil {
			if network == "tcp6" && errors.Is(err, unix.EAFNOSUPPORT) {
				continue
			}
			return fmt.Errorf("health listen %s port %d: %w", network, port, err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(l) }()
	}
	return nil
}

func (s *server) accept(l net.Listener, role string, port int) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go s.handle(c.(*net.TCPConn), role, port)
	}
}

func (s *server) handle(c *net.TCPConn, role string, port int) {
	defer c.Close()
	r := Record{Name: s.name, Role: role, Port: port, Proto: "tcp", Peer: c.RemoteAddr().String(), UID: os.Getuid()}
	if orig, err := originalDst(c); err == nil {
		r.Orig, r.Source = orig, "original_dst"
	} else {
		r.Orig, r.Source = c.LocalAddr().String(), "local"
	}
	line := s.log(r)
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(line); err != nil {
		return
	}
	_ = c.SetWriteDeadline(time.Time{})
	switch {
	case s.relay && r.Source == "original_dst":
		relay(c, r.Orig)
	case s.echo:
		_, _ = io.Copy(c, c)
	}
}

func (s *server) log(r Record) []byte {
	b, _ := json.Marshal(r)
	b = append(b, '\n')
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.out {
		_, _ = w.Write(b)
	}
	return b
}
