package main

// The arm64 build run for real under qemu-user emulation: both binaries
// answer version, and the plugin sets up, checks and removes a meshed
// pod's redirect in a real netns. qemu-user only emulates the netlink
// protocols it translates (NETLINK_ROUTE, NETLINK_KOBJECT_UEVENT,
// NETLINK_AUDIT; every other one fails socket(2) with EPROTONOSUPPORT:
// qemu linux-user/syscall.c, do_socket), so nf_tables is out of reach and
// the auto backend writes with iptables-legacy, the host's native binary.
// The rules must be exactly those the amd64 plugin writes on that path.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/mesh-cni/mesh-cni/internal/node"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// qemuARM64 finds the emulator; make deps installs it (Debian's
// qemu-user-static).
func qemuARM64(t *testing.T) string {
	t.Helper()
	q, err := exec.LookPath("qemu-aarch64-static")
	if err != nil {
		t.Skip("qemu-aarch64-static not found (make deps installs Debian's qemu-user-static): the arm64 plugin was not run")
	}
	return q
}

// runEmulated runs bin under qemu as the runtime runs the plugin.
func runEmulated(t *testing.T, qemu, bin, command, netns string, conf map[string]any) outcome {
	t.Helper()
	return runArgv(t, []string{qemu, bin}, command, netns, conf)
}

// runArgv runs the plugin, argv[len(argv)-1], with argv as the runtime
// runs it: CNI variables, the config on stdin.
func runArgv(t *testing.T, argv []string, command, netns string, conf map[string]any) outcome {
	t.Helper()
	bin := argv[len(argv)-1]
	a := &invoke.Args{Command: command, ContainerID: "c0ffee", NetNS: netns, IfName: "eth0", Path: filepath.Dir(bin), PluginArgsStr: k8sArgs}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), a.AsEnv()...)
	return runPlugin(t, cmd, conf)
}

// runPlugin runs cmd with conf on stdin and returns how it ended: success,
// its output, and the CNI error it printed when it failed.
func runPlugin(t *testing.T, cmd *exec.Cmd, conf map[string]any) outcome {
	t.Helper()
	b, err := json.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin = strings.NewReader(string(b))
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	o := outcome{ok: err == nil, stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run %s: %v", strings.Join(cmd.Args, " "), err)
	}
	if err != nil {
		var e types.Error
		if json.Unmarshal([]byte(o.stdout), &e) == nil && e.Code != 0 && e.Msg != "" {
			o.cniErr = &e
		}
	}
	return o
}

var saveCounters = regexp.MustCompile(`\[\d+:\d+\]`)

// legacyRules is the netns's iptables-legacy state, both families, without
// the save's comments and counters.
func legacyRules(dump map[string]string) string {
	var b strings.Builder
	for _, tool := range []string{"iptables-legacy-save", "ip6tables-legacy-save"} {
		for _, l := range strings.Split(dump[tool], "\n") {
			if l != "" && !strings.HasPrefix(l, "#") {
				b.WriteString(tool + ": " + saveCounters.ReplaceAllString(l, "[0:0]") + "\n")
			}
		}
	}
	return b.String()
}

func TestARM64UnderQemu(t *testing.T) {
	qemu := qemuARM64(t)
	start := time.Now()
	dir := t.TempDir()
	for name, pkg := range map[string]string{"mesh-cni": ".", "mesh-cni-agent": "../installer"} {
		build := exec.Command("go", "build", "-trimpath", "-ldflags", stampFlags, "-o", filepath.Join(dir, name), pkg)
		build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build %s for arm64: %v\n%s", name, err, out)
		}
	}
	t.Logf("arm64 build: %s", time.Since(start).Round(time.Millisecond))
	bin := filepath.Join(dir, "mesh-cni")

	for _, name := range []string{"mesh-cni", "mesh-cni-agent"} {
		out, err := exec.Command(qemu, filepath.Join(dir, name), "version").CombinedOutput()
		if want := name + " " + stampVersion + " (commit " + stampCommit + ")\n"; err != nil || string(out) != want {
			t.Errorf("arm64 %s version: %q %v, want %q", name, out, err, want)
		}
	}

	// What qemu refuses: pinned nftables fails cleanly, naming the reason.
	t.Run("nftables refused", func(t *testing.T) {
		p := newPod(t, "shop", "web-1", nil)
		netns := p.netns.Path()
		conf := withKey(baseConf("1.0.0", netns, istioAnnotations(nil)), "backend", "nftables")
		o := runEmulated(t, qemu, bin, "ADD", netns, conf)
		if o.crashed() || o.cniErr == nil || o.cniErr.Code != ErrApply || !strings.Contains(strings.ToLower(o.cniErr.Msg), "protocol not supported") {
			t.Errorf("ADD: %v, want code %d naming the refused netlink socket", o, ErrApply)
		}
		if got := ours(ruleDump(t, netns)); len(got) != 0 {
			t.Errorf("failed ADD left rules via %v", got)
		}
	})

	t.Run("ADD CHECK DEL", func(t *testing.T) {
		env := newNodeEnv(t)
		// The amd64 plugin on the same path (nf_tables refused, auto)
		// writes the reference rules for the same pod.
		ref := newPod(t, "shop", "web-1", nil)
		refConf := withKey(baseConf("1.0.0", ref.netns.Path(), istioAnnotations(nil)), "backend", "auto")
		t.Cleanup(func() { runRestricted(t, "", "DEL", ref.netns.Path(), refConf) })
		if o := runRestricted(t, "no-nfnetlink", "ADD", ref.netns.Path(), refConf); !o.ok {
			t.Fatalf("amd64 ADD: %v", o)
		}
		want := legacyRules(ruleDump(t, ref.netns.Path()))
		if !strings.Contains(want, ":MESH_") {
			t.Fatalf("amd64 ADD wrote no iptables-legacy rules:\n%s", want)
		}

		p := newPod(t, "shop", "web-1", nil)
		netns := p.netns.Path()
		conf := withKey(baseConf("1.0.0", netns, istioAnnotations(nil)), "backend", "auto")
		conf["reportSocket"] = env.reportSocket
		t.Cleanup(func() { runRestricted(t, "", "DEL", netns, conf) })
		timed := func(verb string) outcome {
			t0 := time.Now()
			o := runEmulated(t, qemu, bin, verb, netns, conf)
			t.Logf("arm64 %s under qemu: %s", verb, time.Since(t0).Round(time.Millisecond))
			return o
		}
		if o := timed("ADD"); !o.ok {
			t.Fatalf("arm64 ADD: %v", o)
		}
		dump := ruleDump(t, netns)
		if got := ours(dump); !slices.Equal(got, []string{"iptables-legacy-save"}) {
			t.Errorf("arm64 rules visible via %v, want iptables-legacy only", got)
		}
		if got := legacyRules(dump); got != want {
			t.Errorf("arm64 rules differ from amd64's:\narm64:\n%s\namd64:\n%s", got, want)
		}
		// The report is a datagram the node side reads on its own.
		err := testenv.WaitFor(testenv.Timeout(), func() error {
			if !slices.ContainsFunc(env.reported(), func(ev node.Event) bool {
				return ev.Command == "ADD" && ev.Decision == "meshed" && ev.Backend == "iptables-legacy" && ev.Fallback == "nftables"
			}) {
				return fmt.Errorf("reported: %+v", env.reported())
			}
			return nil
		})
		if err != nil {
			t.Errorf("arm64 ADD reported no fallback from nftables to iptables-legacy: %v", err)
		}
		if o := timed("CHECK"); !o.ok {
			t.Errorf("arm64 CHECK: %v", o)
		}
		if o := timed("DEL"); !o.ok {
			t.Errorf("arm64 DEL: %v", o)
		}
		if got := ours(ruleDump(t, netns)); len(got) != 0 {
			t.Errorf("arm64 DEL left rules via %v", got)
		}
		// CHECK must see the rules gone: the emulated run reads for real.
		if o := runEmulated(t, qemu, bin, "CHECK", netns, conf); o.ok || o.cniErr == nil || o.cniErr.Code != ErrRulesMissing {
			t.Errorf("arm64 CHECK after DEL: %v, want code %d", o, ErrRulesMissing)
		}
	})
	t.Logf("total: %s", time.Since(start).Round(time.Millisecond))
}
