package agent

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mesh-cni/mesh-cni/pkg/node"
	"github.com/mesh-cni/mesh-cni/pkg/testenv"
)

// The plugin passes its nf_tables sockets with its report; the agent must
// close every fd it is given, valid report or not, and more than fit in
// one control buffer, or each would hold a pod's netns alive. Pipe write
// ends stand in for the sockets: the read end sees EOF only once the last
// copy is closed.
func TestReportClosesPassedFDs(t *testing.T) {
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
	valid, _ := json.Marshal(node.Event{Command: "DEL", Decision: "deleted", Backend: "nftables"})
	var readEnds []*os.File
	send := func(body []byte, n int) {
		t.Helper()
		var fds []int
		for range n {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			readEnds = append(readEnds, r)
			fds = append(fds, int(w.Fd()))
			defer w.Close() // our copy; the datagram holds its own
		}
		rc, _ := c.(*net.UnixConn).SyscallConn()
		var serr error
		rc.Write(func(fd uintptr) bool {
			serr = unix.Sendmsg(int(fd), body, unix.UnixRights(fds...), nil, 0)
			return true
		})
		if serr != nil {
			t.Fatal(serr)
		}
	}
	send(valid, 1)
	send([]byte("{not json"), 2)
	send(valid, maxPassedFDs+4) // the kernel truncates the rest, in the agent
	for i, r := range readEnds {
		r.SetReadDeadline(time.Now().Add(testenv.Timeout()))
		if n, err := r.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("passed fd %d of %d: still open in the agent (read %d, %v)", i+1, len(readEnds), n, err)
		}
		r.Close()
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
