package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// istioKubeconfigName is the file Istio's plugin reads its API credentials
// from, inside its cni_agent_run_dir (constants.CNIPluginKubeconfName; the
// node agent writes it on a real node).
const istioKubeconfigName = "istio-cni-kubeconfig"

// istioEntry is the chain entry Istio's installer writes
// (cni/pkg/install/cniconfig.go, plugin.Config) for sidecar mode:
//
//   - cni_agent_run_dir: a directory of the bench's own holding only
//     istio-cni-kubeconfig (the admin kubeconfig). Without log.sock there the
//     plugin does not tee its logs to a node agent; pluginevent.sock is only
//     dialled in ambient mode, which is off. Its rolling log istio-cni.log
//     would go there too.
//   - plugin_log_level "error", like mesh-cni's logLevel in this benchmark.
//   - exclude_namespaces and pod_namespace as the chart sets them.
//   - native_nftables: Istio's nftables mode (else iptables-restore).
func istioEntry(runDir string, nftables bool) map[string]any {
	return map[string]any{
		"type":                 "istio-cni",
		"plugin_log_level":     "error",
		"cni_agent_run_dir":    runDir,
		"ambient_enabled":      false,
		"enablement_selectors": []any{},
		"exclude_namespaces":   []string{"kube-system"},
		"pod_namespace":        "istio-system",
		"native_nftables":      nftables,
	}
}

// istioConfigText is istioEntry for the report, both modes in one.
func istioConfigText() string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(istioEntry("<dir>", false))
	return "`" + strings.Replace(strings.TrimSpace(b.String()), `"native_nftables":false`, `"native_nftables":false|true`, 1) + "`"
}

// findIstioCNI returns the istio-cni binary: path when set, else what
// hack/build-istio.sh builds (or has cached) for the Istio version pinned
// in hack/istio/go.mod.
func findIstioCNI(path string) (string, error) {
	if path != "" {
		return filepath.Abs(path)
	}
	var out bytes.Buffer
	cmd := exec.Command("bash", "hack/build-istio.sh", "istio-cni")
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("hack/build-istio.sh istio-cni (run from the repository root, or pass -istio-cni): %w", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	return filepath.Join(lines[len(lines)-1], "istio-cni"), nil
}

// istioVersion is the istio.io/istio requirement of hack/istio/go.mod.
func istioVersion() string {
	b, err := os.ReadFile("hack/istio/go.mod")
	if err != nil {
		return "unknown"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "istio.io/istio" {
			return f[1]
		}
	}
	return "unknown"
}
