package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/node"
)

const childEnv = "MESH_CNI_VALIDATOR_ARGS"

// TestMain runs the validator itself when the test binary is started in a
// network namespace by a test below.
func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(childEnv); ok {
		code, msg := run(strings.Fields(args))
		fmt.Fprintln(os.Stderr, msg)
		os.Exit(code)
	}
	os.Exit(m.Run())
}

func sh(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
}

var nsCount int

// newNetns makes a pod-like netns: lo, and an eth0 veth to a second netns
// (the "node", which neither forwards nor answers), with default routes,
// so a connect leaves the normal way and goes nowhere.
func newNetns(t *testing.T) string {
	t.Helper()
	nsCount++
	name := fmt.Sprintf("mcni-val-%d-%d", os.Getpid(), nsCount)
	peer := name + "-n"
	for _, n := range []string{name, peer} {
		sh(t, "ip", "netns", "add", n)
		n := n
		t.Cleanup(func() { exec.Command("ip", "netns", "del", n).Run() })
	}
	sh(t, "ip", "-n", name, "link", "set", "lo", "up")
	sh(t, "ip", "-n", name, "link", "add", "eth0", "type", "veth", "peer", "name", "veth0", "netns", peer)
	sh(t, "ip", "-n", peer, "link", "set", "veth0", "up")
	sh(t, "ip", "-n", name, "addr", "add", "198.51.100.2/24", "dev", "eth0")
	sh(t, "ip", "-n", name, "addr", "add", "2001:db8:1::2/64", "dev", "eth0", "nodad")
	sh(t, "ip", "-n", name, "link", "set", "eth0", "up")
	sh(t, "ip", "-n", name, "route", "add", "default", "dev", "eth0")
	sh(t, "ip", "-n", name, "-6", "route", "add", "default", "dev", "eth0")
	return name
}

// redirect loads outbound redirection like the plugin's: every TCP
// connection not to loopback goes to port, except the proxy's UID.
func redirect(t *testing.T, ns string, port int) {
	t.Helper()
	rules := ""
	for _, fam := range []string{"ip", "ip6"} {
		rules += fmt.Sprintf(`table %s meshtest {
	chain output {
		type nat hook output priority -100; policy accept;
		oifname "lo" return
		meta skuid 2102 return
		meta l4proto tcp redirect to :%d
	}
}
`, fam, port)
	}
	cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v\n%s", err, out)
	}
}

// runIn runs the validator in ns and returns its exit code and output.
func runIn(t *testing.T, ns string, uid int, args ...string) (int, string) {
	t.Helper()
	argv := []string{"netns", "exec", ns, os.Args[0], "-test.run=^$"}
	if uid != 0 {
		// Drop to uid after entering the netns, as a container would run.
		argv = []string{"netns", "exec", ns, "setpriv", "--reuid", fmt.Sprint(uid), "--regid", fmt.Sprint(uid),
			"--clear-groups", worldExecutable(t), "-test.run=^$"}
	}
	cmd := exec.Command("ip", argv...)
	cmd.Env = append(os.Environ(), childEnv+"="+strings.Join(args, " "))
	out, err := cmd.CombinedOutput()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

// worldExecutable copies the test binary where another UID can run it.
func worldExecutable(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mesh-cni-validator-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	p := dir + "/validator.test"
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestValidator(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rulePort int // 0: no rules
		uid      int
		args     []string
		want     int
	}{
		{"redirected", 4140, 0, []string{"--timeout=3s"}, 0},
		{"redirected-ipv6", 4140, 0, []string{"--ipv6", "--timeout=3s"}, 0},
		{"istio-port", 15001, 0, []string{"--outbound-port=15001", "--timeout=3s"}, 0},
		{"no-rules", 0, 0, []string{"--timeout=1s"}, node.ValidatorExitCode},
		{"no-rules-ipv6", 0, 0, []string{"--ipv6", "--timeout=1s"}, node.ValidatorExitCode},
		{"wrong-port", 15001, 0, []string{"--timeout=1s"}, node.ValidatorExitCode},
		{"proxy-uid-exempt", 4140, 2102, []string{"--timeout=1s"}, node.ValidatorExitCode},
		{"bad-flag", 0, 0, []string{"--outbound-port=0"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNetns(t)
			if tc.rulePort != 0 {
				redirect(t, ns, tc.rulePort)
			}
			code, out := runIn(t, ns, tc.uid, tc.args...)
			if code != tc.want {
				t.Fatalf("exit %d, want %d: %s", code, tc.want, out)
			}
			if !strings.Contains(out, "mesh-cni-validator:") {
				t.Errorf("no explanation: %q", out)
			}
		})
	}
}
