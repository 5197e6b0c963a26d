package nftables

import (
	"sync"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Closing the last reference to an nf_tables netlink socket makes the
// kernel finish every pending nf_tables destroy work first (the
// NETLINK_URELEASE notifier flushes it), which waits for an RCU grace
// period: ~10 ms after any commit that deleted something, in any netns of
// the host. The rules are already gone by then; only memory is left to
// free. With KeepSockets, every socket this package opens is duplicated at
// dial, so closing the connection costs nothing, and the caller takes the
// duplicates with TakeSockets to hand them to a longer-lived process (the
// node agent) that closes them off the pod's path.
var kept struct {
	sync.Mutex
	on  bool
	fds []int
}

// KeepSockets turns the hand-off on or off for this process. Off (the
// default), sockets close normally.
func KeepSockets(on bool) {
	kept.Lock()
	kept.on = on
	kept.Unlock()
}

// TakeSockets returns the kept socket fds and forgets them: the caller
// closes them, or passes them on and then closes them.
func TakeSockets() []int {
	kept.Lock()
	defer kept.Unlock()
	fds := kept.fds
	kept.fds = nil
	return fds
}

// keepOption duplicates the socket's fd when KeepSockets is on.
func keepOption() nftables.ConnOption {
	return nftables.WithSockOptions(func(c *netlink.Conn) error {
		kept.Lock()
		defer kept.Unlock()
		if !kept.on {
			return nil
		}
		sc, err := c.SyscallConn()
		if err != nil {
			return err
		}
		return sc.Control(func(fd uintptr) {
			// A failed dup only costs the wait at close.
			if dup, err := unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0); err == nil {
				kept.fds = append(kept.fds, dup)
			}
		})
	})
}
