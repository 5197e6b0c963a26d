package iptables

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// TestSandbox: inside, nsswitch.conf is empty and /run/xtables.lock is the
// netns file; outside, nothing of it shows.
func TestSandbox(t *testing.T) {
	// iptables creates the host lock on its first run; a fresh host has
	// none yet, and then there is nothing to hide. Make the case the
	// sandbox exists for.
	if _, err := os.Stat(hostLock); errors.Is(err, os.ErrNotExist) {
		f, err := os.OpenFile(hostLock, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		t.Cleanup(func() { os.Remove(hostLock) })
	}
	n := testenv.NewNS(t)
	var nsswitch, lock string
	var hidden bool
	var err error
	err = inSandbox(n.Path(), func(s *sandbox) error {
		hidden = s.hidden
		if nsswitch, err = s.run("/bin/cat", "", "/etc/nsswitch.conf"); err != nil {
			return err
		}
		lock, err = s.run("/usr/bin/stat", "", "-L", "-c", "%i", hostLock)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !hidden {
		t.Fatal("sandbox did not get a private mount namespace")
	}
	if nsswitch != "" {
		t.Errorf("nsswitch.conf in the sandbox: %q, want empty", nsswitch)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(n.Path(), &st); err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(lock) != strconv.FormatUint(st.Ino, 10) {
		t.Errorf("xtables lock in the sandbox has inode %s, want the netns' %d", strings.TrimSpace(lock), st.Ino)
	}
	// A child's view, not /proc/self: when the sandbox ran on the main
	// thread, Go keeps that thread (wedged) and /proc/self shows its
	// namespaces; no goroutine runs there again, so no child is forked
	// from it.
	mounts, err := exec.Command("cat", "/proc/self/mountinfo").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mounts), "\n") {
		if strings.Contains(line, " /etc/nsswitch.conf ") || strings.Contains(line, " "+hostLock+" ") {
			t.Errorf("sandbox mount leaked to the host: %s", line)
		}
	}
}

func TestChildPath(t *testing.T) {
	t.Setenv("PATH", "/bin::/usr/sbin:")
	if got, want := childPath(), "/bin:/usr/sbin:/sbin:/usr/local/sbin"; got != want {
		t.Errorf("childPath() = %q, want %q", got, want)
	}
}

// TestSandboxPanic: a panic on the sandbox thread reaches the caller's
// goroutine, where a recover (the plugin's) can catch it.
func TestSandboxPanic(t *testing.T) {
	n := testenv.NewNS(t)
	defer func() {
		if r := recover(); r != "boom" {
			t.Errorf("recovered %v, want boom", r)
		}
	}()
	_ = inSandbox(n.Path(), func(*sandbox) error { panic("boom") })
	t.Error("inSandbox returned after a panic")
}
