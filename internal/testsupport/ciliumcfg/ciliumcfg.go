// Package ciliumcfg renders the cilium-config ConfigMap as Cilium's own Helm
// chart writes it, for the settings combinations internal/ctl/check's tests read.
// The chart is install/kubernetes/cilium of the github.com/cilium/cilium
// module that hack/cilium/go.mod pins (the Cilium the e2e builds and runs).
package ciliumcfg

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/helmcli"
)

// Case is one `helm template` of the chart: its -f file and --set flags.
type Case struct {
	Name   string   // testdata/cilium-config/<Name>.yaml
	Set    []string // as `helm template --set`, in order
	Why    string   // what the combination stands for
	Values string   // as `helm template -f`, relative to the repository root; "" for none
}

// Cases are the combinations the tests read: the chart's defaults, the
// values Istio's and Cilium's guides ask for, and each value that breaks a
// sidecar mesh alone and together.
var Cases = []Case{
	{"defaults", nil, "the chart's defaults (cni.exclusive=true)", ""},
	{"exclusive-false", []string{"cni.exclusive=false"}, "the chart's defaults with cni.exclusive=false", ""},
	{"custom-conf", []string{"cni.customConf=true"}, "Cilium writes no CNI config at all", ""},
	{"socketlb", []string{"cni.exclusive=false", "socketLB.enabled=true"}, "socket LB in every netns", ""},
	{"socketlb-hostns", []string{"cni.exclusive=false", "socketLB.enabled=true", "socketLB.hostNamespaceOnly=true"}, "socket LB in the host netns only", ""},
	{"kpr", []string{"cni.exclusive=false", "kubeProxyReplacement=true", "k8sServiceHost=10.0.0.1", "k8sServicePort=6443"}, "kube-proxy replacement (turns socket LB on)", ""},
	{"kpr-hostns", []string{"cni.exclusive=false", "kubeProxyReplacement=true", "k8sServiceHost=10.0.0.1", "k8sServicePort=6443", "socketLB.hostNamespaceOnly=true"}, "Cilium's Istio guide without kube-proxy", ""},
	{"kpr-hostns-bpf-masquerade", []string{"cni.exclusive=false", "kubeProxyReplacement=true", "k8sServiceHost=10.0.0.1", "k8sServicePort=6443", "socketLB.hostNamespaceOnly=true", "bpf.masquerade=true"}, "the Istio guide's values with BPF masquerading", ""},
	{"all-bad", []string{"kubeProxyReplacement=true", "k8sServiceHost=10.0.0.1", "k8sServicePort=6443", "socketLB.enabled=true"}, "every breaking value at once", ""},
	{"e2e", nil, "the values the e2e runs Cilium with", KindValues},
	{"e2e-exclusive", []string{"cni.exclusive=true"}, "the e2e's values with the chart's default cni.exclusive", KindValues},
}

// KindValues are the values the e2e installs Cilium with.
const KindValues = "hack/cilium/kind-values.yaml"

// Version returns the github.com/cilium/cilium version hack/cilium/go.mod
// requires; root is the repository root.
func Version(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "hack", "cilium", "go.mod"))
	if err != nil {
		return "", fmt.Errorf("read hack/cilium/go.mod: %w", err)
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?github\.com/cilium/cilium (v\S+)`).FindSubmatch(b)
	if m == nil {
		return "", fmt.Errorf("hack/cilium/go.mod requires no github.com/cilium/cilium")
	}
	return string(m[1]), nil
}

// ChartDir returns the chart's directory in the module cache. With
// download it fetches the module when missing; without, it returns an
// error wrapping os.ErrNotExist.
func ChartDir(root string, download bool) (string, error) {
	v, err := Version(root)
	if err != nil {
		return "", err
	}
	modcache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMODCACHE: %w", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(modcache)), "github.com", "cilium", "cilium@"+v, "install", "kubernetes", "cilium")
	if _, err := os.Stat(filepath.Join(dir, "Chart.yaml")); err == nil || !download {
		if err != nil {
			return "", fmt.Errorf("chart of github.com/cilium/cilium %s: %w", v, err)
		}
		return dir, nil
	}
	cmd := exec.Command("go", "mod", "download", "github.com/cilium/cilium@"+v)
	cmd.Dir = filepath.Join(root, "hack", "cilium")
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go mod download github.com/cilium/cilium@%s: %w: %s", v, err, out)
	}
	return dir, nil
}

// Manifest renders the whole chart for c, with `helm template cilium <dir>
// -n kube-system -f ... --set ...` (internal/testsupport/helmcli).
func Manifest(root, dir string, c Case) (string, error) {
	o := helmcli.Options{Release: "cilium", Namespace: "kube-system", Set: c.Set}
	if c.Values != "" {
		o.ValuesFiles = []string{filepath.Join(root, c.Values)}
	}
	r, err := helmcli.Render(dir, o)
	if err != nil {
		return "", fmt.Errorf("%s: %w", c.Name, err)
	}
	return r.Manifest, nil
}

// Render returns the cilium-config ConfigMap, exactly as `helm template
// cilium <dir> -n kube-system -f ... --set ...` prints it (from its "# Source:"
// line on), with a header saying where it came from.
func Render(root, dir, version string, c Case) (string, error) {
	manifest, err := Manifest(root, dir, c)
	if err != nil {
		return "", err
	}
	const src = "# Source: cilium/templates/cilium-configmap.yaml\n"
	i := strings.Index(manifest, src)
	if i < 0 {
		return "", fmt.Errorf("%s: the chart rendered no cilium-configmap.yaml", c.Name)
	}
	doc := manifest[i:]
	if j := strings.Index(doc, "\n---"); j >= 0 {
		doc = doc[:j+1]
	}
	set := ""
	if c.Values != "" {
		set = " -f " + c.Values
	}
	for _, s := range c.Set {
		set += " --set " + s
	}
	return fmt.Sprintf("# %s.\n# Generated by `go generate ./internal/ctl/check` (internal/testsupport/ciliumcfg): the\n"+
		"# chart install/kubernetes/cilium of github.com/cilium/cilium %s\n"+
		"# (hack/cilium/go.mod), rendered as\n#   helm template cilium <chart> -n kube-system%s\n"+
		"# with the Helm library the chart tests use. Do not edit.\n%s",
		upper(c.Why), version, set, doc), nil
}

func upper(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
