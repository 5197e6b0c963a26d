package testenv

import (
	"errors"
	"fmt"
	"os"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
)

// RemoveNS closes n and removes its bind mount (testutils.NewNS's). A plain
// unmount fails with EBUSY while anything holds the netns file open: a
// parallel test's child between fork and exec holds a copy of every fd, so
// under load it sometimes does, and testutils.UnmountNS then leaves the
// netns mounted for good. The lazy unmount detaches it at once; the kernel
// frees it when the last holder lets go.
func RemoveNS(n ns.NetNS) error {
	path := n.Path()
	_ = n.Close()
	if err := unix.Unmount(path, 0); err != nil {
		if !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("unmount netns %s: %w", path, err)
		}
		if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("lazy unmount of busy netns %s: %w", path, err)
		}
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove netns file: %w", err)
	}
	return nil
}
