package testenv

import (
	"os"
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
		ok  bool // started from a thread that ended
	}
	var r result
	release := make(chan struct{})
	defer close(release)
	for range 50 {
		ch := make(chan result)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
			if syscall.Gettid() == os.Getpid() {
				// The main thread is never ended: hold it so that
				// the next try runs on another thread.
				ch <- result{}
				<-release
				runtime.UnlockOSThread()
				return
			}
			p, err := startProcess(dir, "/bin/sleep", "30")
			ch <- result{p, err, true}
		}()
		if r = <-ch; r.ok {
			break
		}
	}
	if !r.ok || r.err != nil {
		t.Fatalf("could not start from a thread of its own: %v", r.err)
	}
	defer r.p.stop()
	time.Sleep(500 * time.Millisecond)
	if r.p.exited() {
		t.Fatalf("the server died with the thread that started it: %v", r.p.err)
	}
}
