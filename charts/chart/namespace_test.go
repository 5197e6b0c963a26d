package chart

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/config"
)

// The chart refuses, on install and on upgrade, a namespace other
// components own, naming the value that allows it; the value allows it,
// and linkerd-cni (the Linkerd guide's namespace) and a namespace of its
// own are never refused.
func TestSharedNamespaceRefused(t *testing.T) {
	for _, n := range config.SharedNamespaces {
		for _, upgrade := range []bool{false, true} {
			_, err := Render(chartDir, Options{Namespace: n.Name, Upgrade: upgrade})
			if err == nil || !strings.Contains(err.Error(), config.AllowSharedNamespace+"=true") || !strings.Contains(err.Error(), `"`+n.Name+`"`) {
				t.Errorf("namespace %s (upgrade %v): %v, want a refusal naming the namespace and %s=true", n.Name, upgrade, err, config.AllowSharedNamespace)
			}
		}
		r, err := Render(chartDir, Options{Namespace: n.Name, Values: map[string]any{config.AllowSharedNamespace: true}})
		if err != nil || !strings.Contains(r.Manifest, "kind: DaemonSet") {
			t.Errorf("namespace %s with %s=true: %v", n.Name, config.AllowSharedNamespace, err)
		}
	}
	for _, ns := range []string{"mesh-cni", "linkerd-cni", "istio-cni", "kube-systems"} {
		if _, err := Render(chartDir, Options{Namespace: ns}); err != nil {
			t.Errorf("namespace %s: %v", ns, err)
		}
	}
	for _, want := range []string{"default", "kube-system", "kube-public", "kube-node-lease", "istio-system", "linkerd", "kuma-system", "consul"} {
		found := false
		for _, n := range config.SharedNamespaces {
			found = found || n.Name == want
		}
		if !found {
			t.Errorf("%s is not among the shared namespaces", want)
		}
	}
}

// Both Helm CLIs: helm template into kube-system fails with the message;
// helm lint, which installs nothing (namespace "default"), passes.
func TestSharedNamespaceHelmCLIs(t *testing.T) {
	for cli, bin := range helmCLIs(t) {
		env := append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
		cmd := exec.Command(bin, "template", "rel", chartDir, "-n", "kube-system", "--kube-version", KubeVersion)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), config.AllowSharedNamespace+"=true") {
			t.Errorf("%s template -n kube-system: %v, want the refusal:\n%s", cli, err, out)
		}
		cmd = exec.Command(bin, "template", "rel", chartDir, "-n", "kube-system", "--kube-version", KubeVersion, "--set", config.AllowSharedNamespace+"=true")
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s template -n kube-system --set %s=true: %v\n%s", cli, config.AllowSharedNamespace, err, out)
		}
		cmd = exec.Command(bin, "lint", "--strict", chartDir)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s lint: %v\n%s", cli, err, out)
		}
	}
}
