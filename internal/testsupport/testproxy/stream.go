package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// relay pipes a redirected connection to its original destination, as a
// mesh proxy does. The proxy runs as the mesh's proxy UID, so its own
// connection is not redirected back to it. When either side ends, both go.
func relay(c *net.TCPConn, orig string) {
	up, err := net.DialTimeout("tcp", orig, 5*time.Second)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testproxy: relay to %s: %v\n", orig, err)
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}

// StreamStatus is the line `testproxy stream` prints every report interval,
// after each error and when it ends.
type StreamStatus struct {
	Time   string `json:"time"`
	Target string `json:"target"`
	// Connections established; more than one means one broke and the
	// client connected again.
	Connections int `json:"connections"`
	RoundTrips  int `json:"roundTrips"`
	// Errors after the first round-trip: a failed dial, write or read, an
	// answer that is not the message sent, or a read past the timeout.
	Errors    int    `json:"errors"`
	LastError string `json:"lastError,omitempty"`
	// LongestGapMs: the longest time between two successful round-trips,
	// the one still open included.
	LongestGapMs int64 `json:"longestGapMs"`
	// RetransSegs: TCP segments the client's network namespace sent again
	// since the first round-trip (RetransSegs in /proc/net/snmp, counted
	// per namespace: in a meshed pod, the client's connection to its proxy
	// and the proxy's relayed one). TCP sends a segment again only when it
	// or its acknowledgement was lost; a busy node stretches the gap
	// between round-trips but sends nothing again, as the kernel
	// acknowledges for a process that is not scheduled. -1: the counter
	// could not be read (the reason on stderr).
	RetransSegs int64 `json:"retransSegs"`
	// Records: the lines the far ends answered with first on the current
	// connection: the proxy's record (with the original destination), then
	// the destination's when the proxy relays.
	Records []Record `json:"records"`
}

type streamState struct {
	mu     sync.Mutex
	st     StreamStatus
	lastOK time.Time
	out    io.Writer
	// retransBase: RetransSegs at the first round-trip; -1 unread.
	retransBase int64
}

func (s *streamState) gap(now time.Time) {
	if s.lastOK.IsZero() {
		return
	}
	if g := now.Sub(s.lastOK).Milliseconds(); g > s.st.LongestGapMs {
		s.st.LongestGapMs = g
	}
}

func (s *streamState) ok() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.gap(now)
	if s.st.RoundTrips == 0 {
		s.retransBase = readRetransSegs()
	}
	s.st.RoundTrips++
	s.lastOK = now
}

// retrans brings RetransSegs up to date; s.mu is held.
func (s *streamState) retrans() {
	if s.st.RoundTrips == 0 {
		return
	}
	s.st.RetransSegs = -1
	if s.retransBase < 0 {
		return
	}
	if n := readRetransSegs(); n >= 0 {
		s.st.RetransSegs = n - s.retransBase
	}
}

// readRetransSegs reads the Tcp RetransSegs counter of the process's
// network namespace; -1 (and the reason on stderr) when it cannot.
func readRetransSegs() int64 {
	b, err := os.ReadFile("/proc/net/snmp")
	if err == nil {
		var n int64
		if n, err = parseRetransSegs(string(b)); err == nil {
			return n
		}
	}
	fmt.Fprintf(os.Stderr, "testproxy: stream: retransmitted segments: %v\n", err)
	return -1
}

// parseRetransSegs finds RetransSegs in /proc/net/snmp's pair of "Tcp:"
// lines, the names and then the values.
func parseRetransSegs(snmp string) (int64, error) {
	var names []string
	for _, line := range strings.Split(snmp, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "Tcp:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i, name := range names {
			if name == "RetransSegs" && i < len(f) {
				return strconv.ParseInt(f[i], 10, 64)
			}
		}
		break
	}
	return 0, errors.New("no Tcp RetransSegs in /proc/net/snmp")
}

func (s *streamState) fail(err error) {
	s.mu.Lock()
	s.st.Errors++
	s.st.LastError = err.Error()
	s.mu.Unlock()
	s.report()
}

func (s *streamState) report() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.gap(now)
	s.retrans()
	s.st.Time = now.UTC().Format(time.RFC3339Nano)
	b, _ := json.Marshal(s.st)
	_, _ = s.out.Write(append(b, '\n'))
}

// stream holds one TCP connection to addr and sends a numbered line every
// interval; each must come back (echoed) within timeout. Lines that come
// back before the first echo are the far ends' records. Until the first
// round-trip, failures are retried for up to setup (the sidecar may not
// listen yet); after it, each failure is an error, and the client connects
// again at the next interval. It ends on SIGTERM or SIGINT.
func stream(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("stream", flag.ContinueOnError)
	interval := fs.Duration("interval", 100*time.Millisecond, "time between messages")
	timeout := fs.Duration("timeout", 5*time.Second, "dial timeout, and how long an answer may take")
	every := fs.Duration("report", time.Second, "time between status lines")
	setup := fs.Duration("setup", time.Minute, "how long to retry until the first round-trip")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("stream needs one HOST:PORT")
	}
	if *interval <= 0 || *timeout <= 0 || *every <= 0 {
		return fmt.Errorf("stream: -interval, -timeout and -report must be positive")
	}
	s := &streamState{st: StreamStatus{Target: fs.Arg(0)}, out: out}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)

	var c *streamConn
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	rep := time.NewTicker(*every)
	defer rep.Stop()
	started := time.Now()
	for seq := 1; ; seq++ {
		select {
		case <-sig:
			s.report()
			return nil
		case <-rep.C:
			s.report()
			continue
		case <-tick.C:
		}
		err := func() error {
			if c == nil {
				var recs []Record
				var err error
				c, recs, err = dialStream(fs.Arg(0), *timeout)
				if err != nil {
					return err
				}
				s.mu.Lock()
				s.st.Connections++
				s.st.Records = recs
				s.mu.Unlock()
			}
			return c.roundTrip(seq, *timeout)
		}()
		if err == nil {
			s.ok()
			continue
		}
		if c != nil {
			c.Close()
			c = nil
		}
		s.mu.Lock()
		first := s.st.RoundTrips == 0
		s.mu.Unlock()
		if first {
			if time.Since(started) > *setup {
				return fmt.Errorf("stream to %s: no round-trip after %v: %w", fs.Arg(0), *setup, err)
			}
			continue
		}
		s.fail(err)
	}
}

type streamConn struct {
	net.Conn
	r *bufio.Reader
	// pending: the records read ahead of the first echo.
	pending []Record
	echoed  bool
}

// dialStream connects and sends nothing yet: the records come with the
// first round-trip's answer (a relaying proxy writes the destination's
// record only once it has connected there).
func dialStream(addr string, timeout time.Duration) (*streamConn, []Record, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, nil, fmt.Errorf("dial: %w", err)
	}
	c := &streamConn{Conn: conn, r: bufio.NewReaderSize(conn, 4096)}
	// The first message's round-trip reads the records; roundTrip(0)
	// is a probe that belongs to no sequence.
	if err := c.roundTrip(0, timeout); err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, c.pending, nil
}

// roundTrip writes "ping SEQ" and reads lines until that line comes back;
// JSON records ahead of the first echo are kept, anything else is an error.
func (c *streamConn) roundTrip(seq int, timeout time.Duration) error {
	msg := fmt.Sprintf("ping %d", seq)
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	for {
		line, err := c.r.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("read: %w", err)
		}
		line = strings.TrimSuffix(line, "\n")
		if line == msg {
			c.echoed = true
			return nil
		}
		var r Record
		if !c.echoed && strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), &r) == nil {
			c.pending = append(c.pending, r)
			continue
		}
		return fmt.Errorf("answer %q to %q", line, msg)
	}
}
