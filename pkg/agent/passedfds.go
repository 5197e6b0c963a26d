package agent

import "golang.org/x/sys/unix"

// The plugin passes the nf_tables netlink sockets it used with its report
// (SCM_RIGHTS) so that the last close, which waits in the kernel for an
// RCU grace period after a deletion, happens here and not on the pod's
// path. The agent only closes them.

// maxPassedFDs is what one report may carry; the kernel closes any beyond
// the control buffer (MSG_CTRUNC) in this process.
const maxPassedFDs = 16

// closers bounds the closes waiting in the kernel at once (each holds a
// thread); the rest queue, and a full queue closes inline.
const closers = 8

type fdCloser chan int

func newFDCloser() fdCloser {
	c := make(fdCloser, 1024)
	for range closers {
		go func() {
			for fd := range c {
				unix.Close(fd)
			}
		}()
	}
	return c
}

func (c fdCloser) closeAll(fds []int) {
	for _, fd := range fds {
		select {
		case c <- fd:
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
