package kindnode

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// TestThawUnderLetsAKillLand builds what a stuck kind node looks like: a
// process in a frozen cgroup below the "node" cgroup, with a SIGKILL
// pending. ThawUnder, given the node's pid, thaws it and the kill lands.
func TestThawUnderLetsAKillLand(t *testing.T) {
	freezer := filepath.Join(CgroupRoot, "freezer")
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups")
	}
	if _, err := os.Stat(filepath.Join(freezer, "freezer.state")); err != nil {
		if _, err := os.Stat(filepath.Join(freezer, "tasks")); err != nil {
			t.Skip("no cgroup v1 freezer hierarchy on this host")
		}
	}
	node := filepath.Join(freezer, "mesh-cni-kindnode-test-"+strconv.Itoa(os.Getpid()))
	inner := filepath.Join(node, "pod", "container")
	// A kind node's systemd moves itself into init.scope, below the node's
	// cgroup and beside the kubelet's slices (on cgroup v2, and in the v1
	// hierarchies systemd manages; here modelled in the v1 freezer, the
	// only freezer this kind of host has).
	initScope := filepath.Join(node, "init.scope")
	for _, d := range []string{inner, initScope} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = os.WriteFile(filepath.Join(inner, "freezer.state"), []byte("THAWED"), 0)
		time.Sleep(100 * time.Millisecond)
		_ = os.Remove(inner)
		_ = os.Remove(filepath.Dir(inner))
		_ = os.Remove(initScope)
		_ = os.Remove(node)
	})
	nodeInit := start(t, initScope)
	stuck := start(t, inner)

	write(t, filepath.Join(inner, "freezer.state"), "FROZEN")
	waitState(t, filepath.Join(inner, "freezer.state"), "FROZEN")
	if err := stuck.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- stuck.Wait() }()
	select {
	case <-done:
		t.Fatal("the kill landed in a frozen cgroup: the premise of this test does not hold")
	case <-time.After(300 * time.Millisecond):
		// A premise check, not a wait: a frozen task cannot die, however
		// long we give it; this only catches a kernel that kills anyway.
	}

	n, err := ThawUnder(nodeInit.Process.Pid)
	if err != nil {
		t.Fatalf("ThawUnder: %v", err)
	}
	if n != 1 {
		t.Errorf("thawed %d cgroups, want 1", n)
	}
	testenv.Receive(t, done, "the killed process still runs after the thaw")
	if n, err := ThawUnder(nodeInit.Process.Pid); err != nil || n != 0 {
		t.Errorf("second ThawUnder = %d, %v; want 0, nil", n, err)
	}
}

// TestThawUnderNeverWalksTheRoot: a process in the root cgroups (pid 1
// here) gives nothing to walk, so nothing outside a node is touched.
func TestThawUnderNeverWalksTheRoot(t *testing.T) {
	dirs, err := cgroupDirs(1)
	if err != nil {
		t.Skip("cannot read pid 1's cgroups:", err)
	}
	for _, d := range dirs {
		if d == CgroupRoot || d == filepath.Join(CgroupRoot, "freezer") || d == filepath.Join(CgroupRoot, "unified") {
			t.Errorf("would walk the whole hierarchy %s", d)
		}
	}
}

func start(t *testing.T, cgroup string) *exec.Cmd {
	t.Helper()
	c := exec.Command("sleep", "600")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill() })
	write(t, filepath.Join(cgroup, "cgroup.procs"), strconv.Itoa(c.Process.Pid))
	return c
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0); err != nil {
		t.Fatal(err)
	}
}

func waitState(t *testing.T, path, want string) {
	t.Helper()
	err := testenv.WaitFor(testenv.Timeout(), func() error {
		b, _ := os.ReadFile(path)
		if got := strings.TrimSpace(string(b)); got != want {
			return fmt.Errorf("%s is %q", path, got)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s never became %s: %v", path, want, err)
	}
}
