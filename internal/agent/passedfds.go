package agent

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The plugin passes the nf_tables netlink sockets it used with its report
// (SCM_RIGHTS) so that the last close, which waits in the kernel for an
// RCU grace period after a deletion while holding the pod netns'
// nf_tables mutex, happens here and not on the pod's path. The agent only
// closes them (it has no CAP_NET_ADMIN to use them), and not at once: a
// close while the primary plugin's DEL removes the pod's interface makes
// that removal wait for the same grace period (the interface's unregister
// takes the mutex too). holdPassed is well past a pod's network teardown.

// maxPassedFDs is what one report may carry; the kernel closes any beyond
// the control buffer (MSG_CTRUNC) in this process.
const maxPassedFDs = 16

// holdPassed is how long passed sockets stay open. Holding one keeps its
// emptied netns alive that long, nothing else.
var holdPassed = 2 * time.Second

const (
	// maxHeld bounds the sockets held at once; beyond it they are closed
	// at once.
	maxHeld = 4096
	// closers bounds the closes waiting in the kernel at once (each holds
	// a thread); the rest queue, and a full queue closes inline.
	closers = 8
)

// held are the passed sockets waiting for their close.
var held struct {
	sync.Mutex
	n int
}

// hold closes fds after holdPassed (at once when too many are held).
func hold(fds []int) {
	if len(fds) == 0 {
		return
	}
	held.Lock()
	if held.n+len(fds) > maxHeld {
		held.Unlock()
		closeFDs(fds)
		return
	}
	held.n += len(fds)
	held.Unlock()
	time.AfterFunc(holdPassed, func() {
		held.Lock()
		held.n -= len(fds)
		held.Unlock()
		closeFDs(fds)
	})
}

var closeQueue = sync.OnceValue(func() chan int {
	c := make(chan int, 1024)
	for range closers {
		go func() {
			for fd := range c {
				unix.Close(fd)
			}
		}()
	}
	return c
})

// closeFDs closes fds off the caller's goroutine.
func closeFDs(fds []int) {
	q := closeQueue()
	for _, fd := range fds {
		select {
		case q <- fd:
		default:
			unix.Close(fd)
		}
	}
}

// passedFDs returns every fd in the control messages; whatever they are,
// the caller must close them.
func passedFDs(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if rights, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, rights...)
		}
	}
	return fds
}
