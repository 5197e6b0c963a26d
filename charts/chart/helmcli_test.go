package chart

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// helmCLIs builds (once, into the cache) and returns the Helm 3 and Helm 4
// command-line tools from the Go module proxy.
func helmCLIs(t *testing.T) map[string]string {
	t.Helper()
	out, err := exec.Command("bash", "../../hack/chart-tools.sh", "helm", "helm4").Output()
	if err != nil {
		t.Fatalf("hack/chart-tools.sh helm helm4: %v", err)
	}
	dir := strings.TrimSpace(string(out))
	return map[string]string{"helm3": filepath.Join(dir, "helm"), "helm4": filepath.Join(dir, "helm4")}
}

// `helm template` of Helm 3 and Helm 4 prints exactly what the library
// render does, for the defaults and every ci values file; schema errors
// are reported by both CLIs too.
func TestHelmCLIsRenderIdentically(t *testing.T) {
	clis := helmCLIs(t)
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "")
	sort.Strings(files)
	for _, f := range files {
		name := "default"
		var vals map[string]any
		if f != "" {
			name = strings.TrimSuffix(filepath.Base(f), "-values.yaml")
			if vals, err = ReadValues(f); err != nil {
				t.Fatal(err)
			}
		}
		want, err := Render(chartDir, Options{Release: "rel", Namespace: "ns", Values: vals})
		if err != nil {
			t.Fatal(err)
		}
		for cli, bin := range clis {
			t.Run(name+"/"+cli, func(t *testing.T) {
				args := []string{"template", "rel", chartDir, "--namespace", "ns", "--kube-version", KubeVersion, "--skip-tests"}
				if f != "" {
					args = append(args, "-f", f)
				}
				cmd := exec.Command(bin, args...)
				cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
				got, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%s %v: %v\n%s", cli, args, err, got)
				}
				if strings.TrimSpace(string(got)) != strings.TrimSpace(want.Manifest) {
					t.Errorf("%s template differs from the library render (Helm 4 keeps a template file's trailing newline: end templates without one):\n%s", cli, testenv.FirstDiff(strings.TrimSpace(want.Manifest), strings.TrimSpace(string(got))))
				}
			})
		}
	}
	for cli, bin := range clis {
		for _, set := range []string{"platform=gcp", "logLevel=3"} {
			cmd := exec.Command(bin, "template", "rel", chartDir, "--kube-version", KubeVersion, "--set", set)
			cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
			out, err := cmd.CombinedOutput()
			key := strings.SplitN(set, "=", 2)[0]
			if err == nil || !strings.Contains(string(out), key) {
				t.Errorf("%s --set %s: want an error naming %s, got %v:\n%s", cli, set, key, err, out)
			}
		}
	}
}
