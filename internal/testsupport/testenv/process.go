package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// process is one server binary with its log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	log     string
	done    chan struct{}
	err     error
	started time.Time
}

func startProcess(dir, bin string, args ...string) (*process, error) {
	name := filepath.Base(bin)
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.Dir = dir
	// Pdeathsig: a test binary that dies (timeout, kill) takes its servers
	// with it instead of leaving them running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{}), started: time.Now()}
	// Pdeathsig fires when the thread that forked exits, not the process.
	// Tests that enter network namespaces end locked threads, so fork from
	// a thread of our own, locked and kept alive until the child exits.
	started := make(chan error)
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	if err := <-started; err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, and SIGKILL after a grace period (scaled).
func (p *process) stop() {
	if p == nil || p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(Scale(10 * time.Second)):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// logTail is the end of the process log, for error messages.
func (p *process) logTail() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 25 {
		lines = lines[len(lines)-25:]
	}
	return strings.Join(lines, "\n")
}

// waitFor polls ok until it returns true, the process exits or ctx ends.
func (p *process) waitFor(ctx context.Context, what string, ok func(context.Context) bool) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if ok(ctx) {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before %s (%w); log %s:\n%s", p.name, what, p.err, p.log, p.logTail())
		case <-ctx.Done():
			return fmt.Errorf("%s: %s: %w; log %s:\n%s", p.name, what, ctx.Err(), p.log, p.logTail())
		case <-tick.C:
		}
	}
}

// freePorts returns n distinct free localhost TCP ports. A port can be taken
// between this call and the server's bind; start retries in that case.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
