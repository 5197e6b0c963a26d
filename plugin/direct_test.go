package main

// These tests exec the plugin binary with the environment and stdin a
// runtime gives it (CNI_COMMAND, CNI_ARGS, ... and the network config with
// prevResult and runtimeConfig), to cover input libcni itself would never
// produce: bad config, missing variables, a missing netns.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

// rawExec runs the plugin as libcni does: stdout is the result or the
// CNI error, stderr goes to the test log.
var rawExec = &invoke.RawExec{Stderr: os.Stderr}

type direct struct {
	command, netns, args string
	conf                 map[string]any
}

func (d direct) run(t *testing.T) ([]byte, error) {
	t.Helper()
	b, err := json.Marshal(d.conf)
	if err != nil {
		t.Fatal(err)
	}
	a := &invoke.Args{Command: d.command, ContainerID: "c0ffee", NetNS: d.netns, IfName: "eth0", Path: pluginDir}
	a.PluginArgsStr = d.args
	return rawExec.ExecPlugin(context.Background(), filepath.Join(pluginDir, "mesh-cni"), b, a.AsEnv())
}

const k8sArgs = "IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-1;K8S_POD_INFRA_CONTAINER_ID=c0ffee;K8S_POD_UID=u1"

// baseConf is a chain entry with a prevResult for netns, as the runtime
// passes it to the last plugin of the chain.
func baseConf(ver, netns string, annotations map[string]string) map[string]any {
	ip := map[string]any{"address": "198.18.250.2/24", "gateway": "198.18.250.1", "interface": 0}
	if ver == "0.3.1" || ver == "0.4.0" {
		ip["version"] = "4"
	}
	c := map[string]any{
		"cniVersion": ver, "name": "direct", "type": "mesh-cni",
		"reportSocket": "/nonexistent/report.sock", "readyMarker": "/nonexistent/ready",
		"agentSocket": "/nonexistent/agent.sock", "kubeconfig": "/nonexistent/kubeconfig", "lookupTimeout": "200ms",
		// No agent here: Istio pods are judged from their annotations.
		"meshes": map[string]any{"istio": map[string]any{"trustAnnotations": true}},
		"prevResult": map[string]any{
			"cniVersion": ver,
			"interfaces": []any{map[string]any{"name": "eth0", "mac": "0a:58:c6:12:fa:02", "sandbox": netns}},
			"ips":        []any{ip},
			"routes":     []any{map[string]any{"dst": "0.0.0.0/0"}},
			"dns":        map[string]any{"nameservers": []string{"198.18.250.10"}},
		},
	}
	if annotations != nil {
		c["runtimeConfig"] = map[string]any{"io.kubernetes.cri.pod-annotations": annotations}
	}
	return c
}

func TestBadInput(t *testing.T) {
	p := newPod(t, "shop", "web-1", nil)
	netns := p.netns.Path()
	badMarker := filepath.Join(t.TempDir(), "ready")
	if err := os.WriteFile(badMarker, []byte(`{"version":"v1"`), 0o644); err != nil {
		t.Fatal(err)
	}
	with := func(c map[string]any, k string, v any) map[string]any { c[k] = v; return c }
	istio := func(k, v string) map[string]string { return istioAnnotations(map[string]string{k: v}) }
	for _, tc := range []struct {
		name string
		d    direct
		raw  string // stdin instead of d.conf
		code uint
		msg  string
	}{
		{"malformed JSON", direct{command: "ADD", netns: netns, args: k8sArgs}, `{"cniVersion":"1.0.0","name":`, types.ErrDecodingFailure, "unexpected end of JSON"},
		{"unknown profile", direct{"ADD", netns, k8sArgs, with(baseConf("1.0.0", netns, nil), "meshes", map[string]any{"cilium": map[string]any{}})},
			"", types.ErrUnsupportedField, `unknown mesh profile "cilium"`},
		{"bad port in config", direct{"ADD", netns, k8sArgs, with(baseConf("1.0.0", netns, nil), "meshes", map[string]any{"linkerd": map[string]any{"ignoreInboundPorts": []string{"4190-41x"}}})},
			"", types.ErrInvalidNetworkConfig, `meshes.linkerd.ignoreInboundPorts: invalid port range "4190-41x"`},
		{"bad CIDR in config", direct{"ADD", netns, k8sArgs, with(baseConf("1.0.0", netns, nil), "meshes", map[string]any{"istio": map[string]any{"skipSubnets": []string{"10.1.0.0/40"}}})},
			"", types.ErrInvalidNetworkConfig, `meshes.istio.skipSubnets: invalid CIDR "10.1.0.0/40"`},
		{"bad backend", direct{"ADD", netns, k8sArgs, with(baseConf("1.0.0", netns, nil), "backend", "bpf")},
			"", types.ErrInvalidNetworkConfig, `invalid backend "bpf"`},
		{"bad port in annotation", direct{"ADD", netns, k8sArgs, baseConf("1.0.0", netns, istio("traffic.sidecar.istio.io/excludeOutboundPorts", "3306,99999"))},
			"", types.ErrInvalidNetworkConfig, `traffic.sidecar.istio.io/excludeOutboundPorts="3306,99999"`},
		{"bad CIDR in annotation", direct{"ADD", netns, k8sArgs, baseConf("1.0.0", netns, istio("traffic.sidecar.istio.io/excludeOutboundIPRanges", "10.0.0.0/8,fd00::/200"))},
			"", types.ErrInvalidNetworkConfig, `traffic.sidecar.istio.io/excludeOutboundIPRanges="10.0.0.0/8,fd00::/200"`},
		{"bad linkerd annotation", direct{"ADD", netns, k8sArgs, with(baseConf("1.0.0", netns, map[string]string{"linkerd.io/proxy-version": "x", "config.linkerd.io/skip-subnets": "10.0.0.300/8"}),
			"meshes", map[string]any{"linkerd": map[string]any{"trustAnnotations": true}})},
			"", types.ErrInvalidNetworkConfig, `config.linkerd.io/skip-subnets="10.0.0.300/8"`},
		// 65k interfaces once made 65k rules: over the cap, refused before parsing.
		{"annotation over its cap", direct{"ADD", netns, k8sArgs, baseConf("1.0.0", netns, istio("traffic.sidecar.istio.io/excludeInterfaces", strings.Repeat("e1,", 65000)+"e1"))},
			"", types.ErrInvalidNetworkConfig, `traffic.sidecar.istio.io/excludeInterfaces="e1,e1,`},
		{"missing CNI_ARGS", direct{"ADD", netns, "", baseConf("1.0.0", netns, istio("x", "y"))},
			"", types.ErrInvalidEnvironmentVariables, "CNI_ARGS lacks K8S_POD_NAMESPACE or K8S_POD_NAME"},
		{"malformed CNI_ARGS", direct{"ADD", netns, "K8S_POD_NAME", baseConf("1.0.0", netns, istio("x", "y"))},
			"", types.ErrInvalidEnvironmentVariables, "invalid CNI_ARGS"},
		{"missing netns", direct{"ADD", "", k8sArgs, baseConf("1.0.0", netns, nil)},
			"", types.ErrInvalidEnvironmentVariables, "CNI_NETNS"},
		{"netns does not exist", direct{"ADD", "/var/run/netns/mesh-cni-no-such-ns", k8sArgs, baseConf("1.0.0", netns, nil)},
			"", types.ErrInvalidNetNS, "failed to open netns /var/run/netns/mesh-cni-no-such-ns"},
		{"version 1.1.0 verbs on 0.3.1", direct{"STATUS", "", "", baseConf("0.3.1", netns, nil)},
			"", types.ErrIncompatibleCNIVersion, "config version does not allow STATUS"},
		{"STATUS without marker", direct{"STATUS", "", "", baseConf("1.1.0", netns, nil)},
			"", types.ErrPluginNotAvailable, "mesh-cni node agent is not ready; readiness marker /nonexistent/ready"},
		{"STATUS with a broken marker", direct{"STATUS", "", "", with(baseConf("1.1.0", netns, nil), "readyMarker", badMarker)},
			"", types.ErrPluginNotAvailable, "is not valid JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.d
			var out []byte
			var err error
			if tc.raw != "" {
				a := &invoke.Args{Command: d.command, ContainerID: "c0ffee", NetNS: d.netns, IfName: "eth0", Path: pluginDir}
				out, err = rawExec.ExecPlugin(context.Background(), filepath.Join(pluginDir, "mesh-cni"), []byte(tc.raw), a.AsEnv())
			} else {
				out, err = d.run(t)
			}
			var e *types.Error
			if !errors.As(err, &e) {
				t.Fatalf("want a CNI error, got %v (stdout %s)", err, out)
			}
			if e.Code != tc.code || !strings.Contains(e.Error(), tc.msg) {
				t.Errorf("got code %d %q, want code %d containing %q", e.Code, e.Error(), tc.code, tc.msg)
			}
			if got := ours(ruleDump(t, netns)); len(got) != 0 {
				t.Errorf("a rejected ADD left rules via %v", got)
			}
		})
	}
	// DEL succeeds whatever went wrong before, even with the bad config.
	for _, d := range []direct{
		{"DEL", netns, k8sArgs, with(baseConf("1.0.0", netns, nil), "meshes", map[string]any{"cilium": map[string]any{}})},
		{"DEL", "", k8sArgs, baseConf("1.0.0", netns, nil)},
		{"DEL", "/var/run/netns/mesh-cni-no-such-ns", "", baseConf("1.0.0", netns, nil)},
	} {
		if out, err := d.run(t); err != nil {
			t.Errorf("DEL netns=%q: %v %s", d.netns, err, out)
		}
	}
}

// ADD prints prevResult unchanged, in the config's version; unchained it
// prints an empty result and finds the pod's addresses in its netns.
func TestPassThrough(t *testing.T) {
	for _, ver := range specVers {
		t.Run(ver, func(t *testing.T) {
			p := newPod(t, "shop", "web-1", nil)
			conf := baseConf(ver, p.netns.Path(), istioAnnotations(nil))
			want, _ := json.Marshal(conf["prevResult"])
			out, err := direct{"ADD", p.netns.Path(), k8sArgs, conf}.run(t)
			if err != nil {
				t.Fatalf("ADD: %v", err)
			}
			if !sameResult(t, ver, want, out) {
				t.Errorf("result changed:\n got %s\nwant %s", out, want)
			}
			if got := ours(ruleDump(t, p.netns.Path())); len(got) == 0 {
				t.Error("meshed pod got no rules")
			}
			if _, err := (direct{"DEL", p.netns.Path(), k8sArgs, conf}).run(t); err != nil {
				t.Fatal(err)
			}

			// Unchained (Multus, OpenShift): no prevResult.
			q := newPod(t, "shop", "web-2", nil)
			name := filepath.Base(q.netns.Path())
			for _, c := range [][]string{
				{"link", "add", "d0", "type", "veth", "peer", "name", "d1"}, {"addr", "add", "198.18.251.2/24", "dev", "d0"},
				{"addr", "add", "fd00:18:fb::2/64", "dev", "d0", "nodad"}, {"link", "set", "d0", "up"}, {"link", "set", "d1", "up"},
			} {
				if b, err := exec.Command("ip", append([]string{"-n", name}, c...)...).CombinedOutput(); err != nil {
					t.Fatalf("ip %v: %v %s", c, err, b)
				}
			}
			conf = baseConf(ver, q.netns.Path(), istioAnnotations(nil))
			delete(conf, "prevResult")
			out, err = direct{"ADD", q.netns.Path(), k8sArgs, conf}.run(t)
			if err != nil {
				t.Fatalf("unchained ADD: %v", err)
			}
			res, err := version.NewResult(ver, out)
			if err != nil {
				t.Fatalf("unchained result %s: %v", out, err)
			}
			if r, _ := current.NewResultFromResult(res); len(r.IPs) != 0 || len(r.Interfaces) != 0 || res.Version() != ver {
				t.Errorf("unchained result must be empty and version %s, got %s", ver, out)
			}
			if got := ours(ruleDump(t, q.netns.Path())); len(got) == 0 {
				t.Error("unchained meshed pod got no rules")
			}
			if _, err := (direct{"DEL", q.netns.Path(), k8sArgs, conf}).run(t); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// sameResult compares two results after decoding both in version ver.
func sameResult(t *testing.T, ver string, want, got []byte) bool {
	t.Helper()
	w, err := version.NewResult(ver, want)
	if err != nil {
		t.Fatal(err)
	}
	g, err := version.NewResult(ver, got)
	if err != nil {
		t.Fatalf("result %s: %v", got, err)
	}
	return reflect.DeepEqual(w, g) && fmt.Sprint(w.Version()) == ver
}

// Without CNI_COMMAND the binary is a CLI; with it, always the plugin.
func TestCLI(t *testing.T) {
	bin := filepath.Join(pluginDir, "mesh-cni")
	cli := func(env []string, args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// The version and commit stamped at link time (as make build does).
	if out, err := cli(nil, "version"); err != nil || out != "mesh-cni "+stampVersion+" (commit "+stampCommit+")\n" {
		t.Errorf("version: %q %v", out, err)
	}
	// explain lives in mesh-cnictl; the plugin says so and fails.
	out, err := cli(nil, "explain", "--profile", "istio")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(out, "mesh-cnictl explain") {
		t.Errorf("explain: want exit 2 pointing to mesh-cnictl explain, got %v\n%s", err, out)
	}
	// A runtime's VERSION call is never mistaken for the CLI.
	out, err = cli([]string{"CNI_COMMAND=VERSION"}, "version")
	if err != nil || !strings.Contains(out, `"supportedVersions"`) || !strings.Contains(out, "1.1.0") {
		t.Errorf("CNI VERSION: %v\n%s", err, out)
	}
	// No command and no subcommand: the about text, as every CNI plugin.
	if out, _ := cli(nil); !strings.Contains(out, "CNI protocol versions supported") {
		t.Errorf("about: %q", out)
	}
}

// A failure while writing the rules is a CNI error and leaves no rule of
// ours behind: here ip6tables-legacy-restore fails (an injected fault first
// in PATH) while the IPv4 half goes through the real iptables-legacy-restore.
func TestApplyFailureLeavesNothing(t *testing.T) {
	p := newPod(t, "shop", "web-1", nil)
	netns := p.netns.Path()
	fault := t.TempDir()
	script := "#!/bin/sh\ncat >/dev/null\necho 'ip6tables-restore: injected failure' >&2\nexit 1\n"
	if err := os.WriteFile(filepath.Join(fault, "ip6tables-legacy-restore"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := withKey(baseConf("1.0.0", netns, istioAnnotations(nil)), "backend", "iptables-legacy")
	prev := conf["prevResult"].(map[string]any)
	prev["ips"] = append(prev["ips"].([]any), map[string]any{"address": "fd00:18:fa::2/64", "interface": 0})
	b, _ := json.Marshal(conf)
	a := &invoke.Args{Command: "ADD", ContainerID: "c0ffee", NetNS: netns, IfName: "eth0", Path: pluginDir, PluginArgsStr: k8sArgs}
	env := append(a.AsEnv(), "PATH="+fault+":"+os.Getenv("PATH"))
	_, err := rawExec.ExecPlugin(context.Background(), filepath.Join(pluginDir, "mesh-cni"), b, env)
	var e *types.Error
	if !errors.As(err, &e) || e.Code != ErrApply || !strings.Contains(e.Msg, "injected failure") {
		t.Fatalf("got %v, want code %d carrying the restore error", err, ErrApply)
	}
	if got := ours(ruleDump(t, netns)); len(got) != 0 {
		t.Errorf("failed ADD left rules via %v", got)
	}
}

func withKey(c map[string]any, k string, v any) map[string]any { c[k] = v; return c }
