package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"

	"github.com/mesh-cni/mesh-cni/internal/mesh"
)

// largestAnnotations are, per mesh, runtime annotations at the caps
// (internal/mesh limits) that make the most rules: a list of UIDs exempt from
// redirection one line or item per UID, the list-per-rule case.
func largestAnnotations() map[string]map[string]string {
	lines := make([]string, mesh.MaxDocumentItems-8)
	for i := range lines {
		lines[i] = fmt.Sprintf("    - '%d'", 20000+2*i)
	}
	uids := make([]string, mesh.MaxDocumentItems-8)
	for i := range uids {
		uids[i] = fmt.Sprintf("%q", fmt.Sprint(20000+i))
	}
	return map[string]map[string]string{
		"kuma": {mesh.KumaSidecarInjected: "true",
			mesh.KumaConfig: "redirect:\n  outbound:\n    excludePortsForUIDs:\n" + strings.Join(lines, "\n")},
		"consul": {mesh.ConsulInjectStatus: "injected", mesh.ConsulTProxyStatus: "enabled",
			mesh.ConsulRedirectConfig: `{"ProxyUserID":"5995","ProxyInboundPort":20000,"ProxyOutboundPort":15001,"ExcludeUIDs":[` + strings.Join(uids, ",") + `]}`},
	}
}

// execPlugin runs the plugin binary once, as a runtime does, and returns
// its stdout, its time and its resource use (wait4's: the plugin's and
// that of every process it waited for, iptables-restore included).
func execPlugin(t *testing.T, command, netns string, conf map[string]any) ([]byte, time.Duration, *syscall.Rusage, error) {
	t.Helper()
	b, err := json.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	a := &invoke.Args{Command: command, ContainerID: "c0ffee", NetNS: netns, IfName: "eth0", Path: pluginDir,
		PluginArgsStr: "IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=big-0;K8S_POD_UID=u1"}
	cmd := exec.Command(filepath.Join(pluginDir, "mesh-cni"))
	cmd.Env = append(os.Environ(), a.AsEnv()...)
	cmd.Stdin = bytes.NewReader(b)
	start := time.Now()
	out, err := cmd.Output()
	took := time.Since(start)
	ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if err != nil {
		err = fmt.Errorf("%s: %w: %s", command, err, out)
	}
	return out, took, ru, err
}

// TestLargestPodCost runs ADD, CHECK and DEL of the largest pods the caps
// allow, dual-stack, with each backend, in real network namespaces, and
// logs what ADD costs: the rules written, its time, and the peak RSS of
// the plugin and what it ran (iptables-restore for the iptables backends).
// The figures are in internal/mesh/README.md.
func TestLargestPodCost(t *testing.T) {
	for m, ann := range largestAnnotations() {
		for _, backend := range []string{"nftables", "iptables-nft", "iptables-legacy"} {
			t.Run(m+"/"+backend, func(t *testing.T) {
				p := newPod(t, "shop", "big-0", nil)
				conf := baseConf("1.0.0", p.netns.Path(), ann)
				prev := conf["prevResult"].(map[string]any)
				prev["ips"] = append(prev["ips"].([]any), map[string]any{"address": "fd00:250::2/64", "interface": 0})
				conf["backend"] = backend
				conf["meshes"] = map[string]any{m: map[string]any{"enabled": true, "trustAnnotations": true}}
				_, took, ru, err := execPlugin(t, "ADD", p.netns.Path(), conf)
				if err != nil {
					t.Fatal(err)
				}
				if _, _, _, err := execPlugin(t, "CHECK", p.netns.Path(), conf); err != nil {
					t.Errorf("CHECK: %v", err)
				}
				dump := ruleDump(t, p.netns.Path())
				n := 0
				for tool, out := range dump {
					for _, l := range strings.Split(out, "\n") {
						if (backend == "nftables" && tool == "nft list ruleset" && strings.Contains(l, "counter")) ||
							(backend != "nftables" && strings.HasPrefix(tool, "ip") && strings.HasPrefix(l, "-A MESH_")) {
							n++
						}
					}
				}
				if n < mesh.MaxDocumentItems-8 {
					t.Errorf("%d rules written, want at least one per exempt UID", n)
				}
				t.Logf("%s, %s: %d rules, ADD %d ms, peak RSS %.1f MiB", m, backend, n, took.Milliseconds(), float64(ru.Maxrss)/1024)
				if _, _, _, err := execPlugin(t, "DEL", p.netns.Path(), conf); err != nil {
					t.Errorf("DEL: %v", err)
				}
				if got := ours(ruleDump(t, p.netns.Path())); len(got) != 0 {
					t.Errorf("DEL left rules via %v", got)
				}
			})
		}
	}
}
