package main

// The plugin binary run with its socket creation made to fail: an
// RLIMIT_NOFILE too low for some socket(2), or a seccomp filter refusing
// nf_tables netlink sockets as a kernel without nfnetlink (or an emulator)
// does. The test binary is the launcher: it restricts itself, then execs
// the plugin, which inherits the restriction.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"golang.org/x/sys/unix"

	"github.com/mesh-cni/mesh-cni/internal/node"
)

const (
	restrictEnv   = "MESH_CNI_TEST_RESTRICT" // "nofile=N" or "no-nfnetlink"
	restrictedEnv = "MESH_CNI_TEST_RESTRICTED_BINARY"
)

// launchRestricted is TestMain's launcher mode: it applies the restriction
// to this thread and execs the plugin in its place. It returns only on
// failure.
func launchRestricted(spec string) int {
	runtime.LockOSThread() // the seccomp filter is per thread until exec
	var err error
	switch {
	case strings.HasPrefix(spec, "nofile="):
		var n uint64
		if n, err = strconv.ParseUint(strings.TrimPrefix(spec, "nofile="), 10, 32); err == nil {
			err = syscall.Setrlimit(unix.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n})
		}
	case spec == "no-nfnetlink":
		err = refuseNFNetlink()
	default:
		err = fmt.Errorf("unknown restriction %q", spec)
	}
	if err == nil {
		bin := os.Getenv(restrictedEnv)
		err = syscall.Exec(bin, []string{bin}, os.Environ())
	}
	fmt.Fprintln(os.Stderr, "launcher:", err)
	return 111
}

// refuseNFNetlink installs a seccomp filter that fails
// socket(AF_NETLINK, *, NETLINK_NETFILTER) with EPROTONOSUPPORT, what a
// kernel without nfnetlink returns; every other call passes.
func refuseNFNetlink() error {
	arch, ok := map[string]uint32{"amd64": unix.AUDIT_ARCH_X86_64, "arm64": unix.AUDIT_ARCH_AARCH64}[runtime.GOARCH]
	if !ok {
		return fmt.Errorf("no seccomp arch for %s", runtime.GOARCH)
	}
	const (
		ld   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K
		args = 16 // offsetof(struct seccomp_data, args); low words on little endian
	)
	prog := []unix.SockFilter{
		{Code: ld, K: 4}, // arch
		{Code: jeq, Jf: 7, K: arch},
		{Code: ld, K: 0}, // nr
		{Code: jeq, Jf: 5, K: unix.SYS_SOCKET},
		{Code: ld, K: args}, // domain
		{Code: jeq, Jf: 3, K: unix.AF_NETLINK},
		{Code: ld, K: args + 16}, // protocol
		{Code: jeq, Jf: 1, K: unix.NETLINK_NETFILTER},
		{Code: ret, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPROTONOSUPPORT)},
		{Code: ret, K: unix.SECCOMP_RET_ALLOW},
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0); err != nil {
		return fmt.Errorf("seccomp: %w", err)
	}
	return nil
}

// outcome is one restricted plugin run.
type outcome struct {
	ok             bool
	cniErr         *types.Error
	stdout, stderr string
}

// crashed says the run ended in a Go panic or fatal error instead of a
// result or a CNI error.
func (o outcome) crashed() bool {
	return !o.ok && o.cniErr == nil || strings.Contains(o.stderr, "goroutine ") || strings.Contains(o.stderr, "panic:")
}

// runtimeFloor is a limit below what the Go runtime itself needs: it dies
// creating its poller before or around the plugin's first file, with
// nothing of ours to blame or fix.
func (o outcome) runtimeFloor() bool {
	return o.stdout == "" && (strings.Contains(o.stderr, "fatal error: runtime: netpollinit failed") ||
		strings.Contains(o.stderr, "fatal error: runtime: eventfd failed"))
}

func (o outcome) String() string {
	if o.ok {
		return "success"
	}
	if o.cniErr != nil {
		return fmt.Sprintf("CNI error %d %q", o.cniErr.Code, o.cniErr.Error())
	}
	i := strings.Index(o.stderr, "panic:")
	if j := strings.Index(o.stderr, "fatal error:"); i < 0 {
		i = max(j, 0)
	}
	first, _, _ := strings.Cut(o.stderr[i:], "\n")
	return fmt.Sprintf("crash, stdout %q, stderr %s", o.stdout, first)
}

// runRestricted runs the plugin under restrict ("" for none).
func runRestricted(t *testing.T, restrict, command, netns string, conf map[string]any) outcome {
	t.Helper()
	a := &invoke.Args{Command: command, ContainerID: "c0ffee", NetNS: netns, IfName: "eth0", Path: pluginDir, PluginArgsStr: k8sArgs}
	bin := filepath.Join(pluginDir, "mesh-cni")
	cmd := exec.Command(bin)
	if restrict != "" {
		cmd = exec.Command(os.Args[0])
	}
	cmd.Env = append(a.AsEnv(), restrictEnv+"="+restrict, restrictedEnv+"="+bin)
	return runPlugin(t, cmd, conf)
}

// TestSocketLimit: ADD and DEL of a meshed pod with every file limit from
// the lowest up to one that lets them through. Wherever a socket (or any
// file) cannot be created the plugin must fail with a CNI error naming the
// reason and leave no rule of ours, never panic; and some limit must be the
// one where the netns file opens and a netlink socket does not.
func TestSocketLimit(t *testing.T) {
	for _, be := range []string{"nftables", "auto"} {
		t.Run(be, func(t *testing.T) {
			p := newPod(t, "shop", "web-1", nil)
			netns := p.netns.Path()
			conf := withKey(baseConf("1.0.0", netns, istioAnnotations(nil)), "backend", be)
			mustRun := func(cmd string) {
				t.Helper()
				if o := runRestricted(t, "", cmd, netns, conf); !o.ok {
					t.Fatalf("%s without a limit: %v", cmd, o)
				}
			}
			clean := func(what string) {
				t.Helper()
				if got := ours(ruleDump(t, netns)); len(got) != 0 {
					t.Fatalf("%s left rules via %v", what, got)
				}
			}
			floor, socketFailed, streak := 0, map[string]bool{}, 0
			for n := 1; n <= 64 && streak < 3; n++ {
				limit := fmt.Sprintf("nofile=%d", n)
				add := runRestricted(t, limit, "ADD", netns, conf)
				mustRun("DEL")
				clean("ADD with " + limit + " then DEL")
				mustRun("ADD")
				del := runRestricted(t, limit, "DEL", netns, conf)
				if del.ok {
					clean("DEL with " + limit)
				}
				mustRun("DEL")
				below := floor
				for verb, o := range map[string]outcome{"ADD": add, "DEL": del} {
					t.Logf("%s %s: %v", verb, limit, o)
					switch {
					case o.runtimeFloor() && n == below+1:
						floor = n
					case o.crashed():
						t.Errorf("%s with %s: %v", verb, limit, o)
					case o.cniErr != nil:
						if o.cniErr.Code != ErrApply && o.cniErr.Code != types.ErrInvalidNetNS || !strings.Contains(o.cniErr.Error(), "too many open files") {
							t.Errorf("%s with %s: %v, want code %d naming the exhausted files", verb, limit, o, ErrApply)
						}
						if strings.Contains(o.cniErr.Msg, "socket: too many open files") {
							socketFailed[verb] = true
						}
					}
				}
				streak++
				if !add.ok || !del.ok {
					streak = 0
				}
			}
			if streak < 3 {
				t.Errorf("no file limit up to 64 let ADD and DEL through")
			}
			for _, verb := range []string{"ADD", "DEL"} {
				if !socketFailed[verb] {
					t.Errorf("no limit failed %s at socket(2) in the pod's netns (limits %d..64 tried)", verb, floor+1)
				}
			}
		})
	}
}

// TestNoNFNetlink: a kernel that refuses nf_tables netlink sockets (no
// nfnetlink; an emulator such as qemu-user). Pinned nftables or
// iptables-nft (whose chains the plugin reads and removes through the same
// netlink) fails ADD with a CNI error naming the reason and leaves nothing,
// CHECK fails with the reason, and DEL succeeds: nothing of ours can exist
// there. auto writes the rules with iptables-legacy, reports the fallback
// from nftables, and CHECK and DEL find them there.
func TestNoNFNetlink(t *testing.T) {
	for _, be := range []string{"nftables", "iptables-nft"} {
		t.Run(be, func(t *testing.T) {
			p := newPod(t, "shop", "web-1", nil)
			netns := p.netns.Path()
			conf := withKey(baseConf("1.0.0", netns, istioAnnotations(nil)), "backend", be)
			o := runRestricted(t, "no-nfnetlink", "ADD", netns, conf)
			if o.crashed() || o.cniErr == nil || o.cniErr.Code != ErrApply || !strings.Contains(strings.ToLower(o.cniErr.Msg), "protocol not supported") {
				t.Errorf("ADD: %v, want code %d naming the refused socket", o, ErrApply)
			}
			if got := ours(ruleDump(t, netns)); len(got) != 0 {
				t.Errorf("failed ADD left rules via %v", got)
			}
			if o := runRestricted(t, "no-nfnetlink", "CHECK", netns, conf); o.crashed() || o.cniErr == nil || o.cniErr.Code != ErrRulesMissing || !strings.Contains(strings.ToLower(o.cniErr.Msg), "protocol not supported") {
				t.Errorf("CHECK: %v, want code %d naming the refused socket", o, ErrRulesMissing)
			}
			if o := runRestricted(t, "no-nfnetlink", "DEL", netns, conf); !o.ok {
				t.Errorf("DEL: %v", o)
			}
		})
	}
	t.Run("auto", func(t *testing.T) {
		env := newNodeEnv(t)
		p := newPod(t, "shop", "web-1", nil)
		netns := p.netns.Path()
		conf := withKey(baseConf("1.0.0", netns, istioAnnotations(nil)), "backend", "auto")
		conf["reportSocket"] = env.reportSocket
		t.Cleanup(func() { runRestricted(t, "", "DEL", netns, conf) })
		if o := runRestricted(t, "no-nfnetlink", "ADD", netns, conf); !o.ok {
			t.Fatalf("ADD: %v", o)
		}
		if got := ours(ruleDump(t, netns)); !slices.Equal(got, []string{"iptables-legacy-save"}) {
			t.Errorf("rules visible via %v, want iptables-legacy only", got)
		}
		fell := slices.ContainsFunc(env.reported(), func(ev node.Event) bool {
			return ev.Command == "ADD" && ev.Decision == "meshed" && ev.Backend == "iptables-legacy" && ev.Fallback == "nftables"
		})
		if !fell {
			t.Errorf("no fallback from nftables reported: %+v", env.reported())
		}
		if o := runRestricted(t, "no-nfnetlink", "CHECK", netns, conf); !o.ok {
			t.Errorf("CHECK: %v", o)
		}
		for range 2 { // DEL is idempotent
			if o := runRestricted(t, "no-nfnetlink", "DEL", netns, conf); !o.ok {
				t.Errorf("DEL: %v", o)
			}
			if got := ours(ruleDump(t, netns)); len(got) != 0 {
				t.Errorf("DEL left rules via %v", got)
			}
		}
	})
}
