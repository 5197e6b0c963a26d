package main

import (
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mesh-cni/mesh-cni/internal/node"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// A report reaches the agent however long the plugin was held up on the
// way (a loaded node deschedules it), and a full queue drops it at once.
func TestReportIgnoresTheClock(t *testing.T) {
	env := newNodeEnv(t)
	t.Cleanup(func() { beforeSend = nil })
	beforeSend = func() { time.Sleep(200 * time.Millisecond) }
	report(env.reportSocket, node.Event{Command: "ADD", Decision: "failed", Message: "late"}, time.Now())
	testenv.EventuallyTrue(t, "the late report", func() bool {
		return slices.ContainsFunc(env.reported(), func(ev node.Event) bool { return ev.Message == "late" })
	})

	// Nobody reads this socket: fill its queue, then report must return
	// without waiting for room (the verb's own deadline is the runtime's).
	beforeSend = nil
	full := filepath.Join(t.TempDir(), "full.sock")
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: full, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("unixgram", full)
	if err != nil {
		t.Fatal(err)
	}
	fd, _ := c.(*net.UnixConn).SyscallConn()
	for queued := 0; ; queued++ {
		var serr error
		_ = fd.Write(func(fd uintptr) bool { serr = unix.Send(int(fd), []byte("x"), unix.MSG_DONTWAIT); return true })
		if serr == unix.EAGAIN {
			break
		}
		if serr != nil || queued > 1<<16 {
			t.Fatalf("filling the queue: %v after %d", serr, queued)
		}
	}
	c.Close()
	done := make(chan struct{})
	go func() { defer close(done); report(full, node.Event{Command: "ADD"}, time.Now()) }()
	testenv.Receive(t, done, "report waited on a full queue")
}
