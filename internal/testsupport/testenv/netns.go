package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
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

// RuntimeNS is a netns (NewNS) whose eth0, one end of a veth pair, holds
// addr (a prefix, "10.244.1.7/24"; no duplicate address detection), bind
// mounted at dir/file as a container runtime keeps a pod's netns: the
// tests of code that finds a pod's netns by its address start here.
func RuntimeNS(t testing.TB, dir, file, addr string) ns.NetNS {
	t.Helper()
	n := NewNS(t)
	if err := n.Do(func(ns.NetNS) error {
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "peer0"}); err != nil {
			return fmt.Errorf("add veth eth0: %w", err)
		}
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		return addrNoDAD(l, addr)
	}); err != nil {
		t.Fatalf("netns eth0 %s: %v", addr, err)
	}
	target := filepath.Join(dir, file)
	if err := os.WriteFile(target, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(n.Path(), target, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind mount netns at %s: %v", target, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })
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
