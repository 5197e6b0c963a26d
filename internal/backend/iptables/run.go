package iptables

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// sandbox is an OS thread inside the pod netns with a private mount
// namespace, in which the iptables binaries run:
//   - /etc/nsswitch.conf is hidden (bind-mounted /dev/null), so "-m owner"
//     never triggers NSS lookups (LDAP, sssd) on the node;
//   - the xtables lock is the netns file itself, both through
//     XTABLES_LOCKFILE (iptables >= 1.8.6) and bind-mounted over
//     /run/xtables.lock (older ones), so we never wait on the host-wide lock
//     kube-proxy holds, only on other programs of the same pod netns.
//
// The thread is never unlocked: it left the host's namespaces, so the Go
// runtime discards it when the goroutine ends.
type sandbox struct {
	netnsPath string
	env       []string
	hidden    bool // private mount namespace with nsswitch.conf and the host lock hidden
}

const hostLock = "/run/xtables.lock"

// inSandbox runs fn on a sandbox thread in netnsPath.
func inSandbox(netnsPath string, fn func(*sandbox) error) error {
	nsf, err := os.Open(netnsPath)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", netnsPath, err)
	}
	defer nsf.Close()
	errc := make(chan error, 1)
	// A panic on the sandbox thread is raised again on the caller's
	// goroutine, where the plugin's recover makes it a CNI error; left
	// here it would end the process with a stack trace.
	var panicked any
	go func() {
		runtime.LockOSThread()
		errc <- func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					panicked, err = r, errors.New("panic on the netns thread")
				}
			}()
			if err := unix.Setns(int(nsf.Fd()), unix.CLONE_NEWNET); err != nil {
				return fmt.Errorf("enter netns %s: %w", netnsPath, err)
			}
			s := &sandbox{netnsPath: netnsPath, env: []string{
				"PATH=" + childPath(),
				"XTABLES_LOCKFILE=" + netnsPath,
			}}
			// Best effort, as where SELinux or a read-only root forbids
			// it: XTABLES_LOCKFILE alone keeps iptables >= 1.8.6 off the
			// host lock.
			s.hidden = hide(netnsPath) == nil
			return fn(s)
		}()
	}()
	err = <-errc
	if panicked != nil {
		panic(panicked)
	}
	return err
}

// childPath is the PATH the tools run with: where they were found.
func childPath() string {
	return strings.Join(toolDirs(), string(filepath.ListSeparator))
}

// hide gives the thread a private mount namespace in which nsswitch.conf
// is empty and the host's xtables lock is the netns file.
func hide(netnsPath string) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare mount namespace: %w", err)
	}
	// Nothing we mount may propagate to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := bind("/dev/null", "/etc/nsswitch.conf"); err != nil {
		return err
	}
	return bind(netnsPath, hostLock)
}

// bind mounts src over an existing dst; a missing dst needs no hiding.
func bind(src, dst string) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("bind %s over %s: %w", src, dst, err)
	}
	return nil
}

// run executes path with args and stdin on the sandbox thread and returns
// stdout; the error carries stderr.
func (s *sandbox) run(path string, stdin string, args ...string) (string, error) {
	cmd := exec.Command(path, args...)
	cmd.Env = s.env
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", path, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// nsenter runs path through "nsenter --net=": the simple alternative to
// the sandbox, kept for the benchmark that compares the two.
func nsenter(netnsPath, path, stdin string, args ...string) error {
	cmd := exec.Command("nsenter", append([]string{"--net=" + netnsPath, "--", path}, args...)...)
	cmd.Env = []string{"PATH=" + childPath(), "XTABLES_LOCKFILE=" + netnsPath}
	cmd.Stdin = strings.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("nsenter %s: %w: %s", path, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}
