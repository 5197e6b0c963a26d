package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// A server must outlive the thread that started it: tests that enter
// network namespaces end their locked threads, and Pdeathsig follows the
// forking thread, not the process.
func TestProcessOutlivesStartingThread(t *testing.T) {
	dir := t.TempDir()
	type result struct {
		p   *process
		err error
		tid int  // the thread that called startProcess
		ok  bool // started from a thread that ended
	}
	var r result
	release := make(chan struct{})
	defer close(release)
	// The server answers SIGUSR1 by writing ack, once its trap is set
	// (ready). A process sent SIGKILL never runs a handler again, so an
	// answer to a signal sent after the starting thread is gone shows it
	// was not killed with that thread.
	ready, ack := filepath.Join(dir, "ready"), filepath.Join(dir, "ack")
	script := `trap ': >ack' USR1; : >ready; while :; do sleep 0.05; done`
	for range 50 {
		ch := make(chan result)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
			tid := syscall.Gettid()
			if tid == os.Getpid() {
				// The main thread is never ended: hold it so that
				// the next try runs on another thread.
				ch <- result{}
				<-release
				runtime.UnlockOSThread()
				return
			}
			p, err := startProcess(dir, "/bin/sh", "-c", script)
			ch <- result{p, err, tid, true}
		}()
		if r = <-ch; r.ok {
			break
		}
	}
	if !r.ok || r.err != nil {
		t.Fatalf("could not start from a thread of its own: %v", r.err)
	}
	defer r.p.stop()
	alive := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(Timeout())
		for !ok() {
			if r.p.exited() {
				t.Fatalf("the server died with the thread that started it: %v", r.p.err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v", what, Timeout())
			}
			time.Sleep(10 * time.Millisecond)
		}
		if r.p.exited() {
			t.Fatalf("the server died with the thread that started it: %v", r.p.err)
		}
	}
	exists := func(path string) bool { _, err := os.Stat(path); return err == nil }
	// The thread is gone from /proc only after its exit sent any
	// Pdeathsig.
	alive("starting thread ended", func() bool { return !exists(fmt.Sprintf("/proc/self/task/%d", r.tid)) })
	alive("server set its trap", func() bool { return exists(ready) })
	if err := r.p.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatalf("the server died with the thread that started it: %v", err)
	}
	alive("server answered a signal sent after the thread ended", func() bool { return exists(ack) })
}
