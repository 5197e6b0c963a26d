package agent

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mesh-cni/mesh-cni/internal/agent/metrics"
	"github.com/mesh-cni/mesh-cni/internal/node"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// The plugin passes its nf_tables sockets with its report. The agent holds
// them (closing at once would stall the primary's DEL) and then closes
// every fd it was given, valid report or not, more than fit in one control
// buffer included: each would otherwise hold a pod's netns alive. Pipe
// write ends stand in for the sockets: the read end sees EOF only once the
// last copy is closed.
func TestReportHoldsThenClosesPassedFDs(t *testing.T) {
	old := holdPassed
	defer func() { holdPassed = old }()
	sock := filepath.Join(t.TempDir(), "report.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeReports(ctx, sock, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	testenv.EventuallyTrue(t, "socket", func() bool { _, err := os.Stat(sock); return err == nil })
	c, err := net.Dial("unixgram", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	event := func(reason string) []byte {
		b, _ := json.Marshal(node.Event{Command: "DEL", Decision: "deleted", Backend: "nftables", Reason: reason})
		return b
	}
	// send passes n fresh pipe write ends and returns their read ends.
	send := func(body []byte, n int) []*os.File {
		t.Helper()
		var fds []int
		var readEnds []*os.File
		for range n {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			readEnds = append(readEnds, r)
			fds = append(fds, int(w.Fd()))
			defer w.Close() //nolint:gocritic // our copy, open until the datagram is sent after the loop
		}
		var oob []byte
		if n > 0 {
			oob = unix.UnixRights(fds...)
		}
		rc, _ := c.(*net.UnixConn).SyscallConn()
		var serr error
		rc.Write(func(fd uintptr) bool { serr = unix.Sendmsg(int(fd), body, oob, nil, 0); return true })
		if serr != nil {
			t.Fatal(serr)
		}
		return readEnds
	}
	// read returns what one read of r ends with, after waiting up to d.
	read := func(r *os.File, d time.Duration) error {
		r.SetReadDeadline(time.Now().Add(d))
		_, err := r.Read(make([]byte, 1))
		return err
	}

	// Held: still open after the agent has read a later report.
	holdPassed = time.Hour
	heldEnds := send(event("held"), 2)
	marker := metrics.PluginDecisions.WithLabelValues("DEL", "deleted", "held-marker", "")
	before := value(marker)
	send(event("held-marker"), 0)
	testenv.EventuallyTrue(t, "later report counted", func() bool { return value(marker) == before+1 })
	held.Lock()
	n := held.n
	held.Unlock()
	if n != len(heldEnds) {
		t.Fatalf("agent holds %d passed fds, want %d", n, len(heldEnds))
	}
	for i, r := range heldEnds {
		// One non-blocking read: EAGAIN while a copy is open, EOF once not.
		rc, _ := r.SyscallConn()
		var rerr error
		rc.Read(func(fd uintptr) bool { _, rerr = unix.Read(int(fd), make([]byte, 1)); return true })
		if !errors.Is(rerr, unix.EAGAIN) {
			t.Fatalf("passed fd %d closed before its hold ended (%v)", i+1, rerr)
		}
	}

	// Then closed, whatever came with them.
	holdPassed = 10 * time.Millisecond
	for what, ends := range map[string][]*os.File{
		"report":           send(event("closed"), 1),
		"not a report":     send([]byte("{not json"), 2),
		"more than fit":    send(event("closed"), maxPassedFDs+4),
		"report, no event": send([]byte(`{"cmd":"DEL"}`), 1),
	} {
		for i, r := range ends {
			if err := read(r, testenv.Timeout()); !errors.Is(err, io.EOF) {
				t.Fatalf("%s: passed fd %d of %d still open in the agent (%v)", what, i+1, len(ends), err)
			}
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
