package testenv

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"golang.org/x/sys/unix"
)

// NewNS makes a network namespace that t removes when it ends (RemoveNS),
// or skips t when not root.
func NewNS(t testing.TB) ns.NetNS {
	t.Helper()
	NeedRoot(t)
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatalf("new netns: %v", err)
	}
	t.Cleanup(func() {
		if err := RemoveNS(n); err != nil {
			t.Error(err)
		}
	})
	return n
}

// NeedRoot skips t when not root: network namespaces need it.
func NeedRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
}

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
