package hack

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// toolModuleVersion is the version of module that the tool module in dir
// (from the repo root, e.g. hack/tools/helm3) requires: the tool's pin.
func toolModuleVersion(t *testing.T, dir, module string) string {
	t.Helper()
	cmd := exec.Command("go", "list", "-mod=readonly", "-m", "-f", "{{.Version}}", module)
	cmd.Dir = filepath.Join("..", dir)
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -m %s in %s: %v", module, dir, err)
	}
	v := strings.TrimSpace(string(out))
	if !strings.HasPrefix(v, "v") {
		t.Fatalf("%s requires %s at %q", dir, module, v)
	}
	return v
}

// The chart tools and kind, built by the scripts the Makefile and tests use,
// print the version their tool module pins.
func TestToolsPrintPinnedVersions(t *testing.T) {
	out, err := exec.Command("bash", "chart-tools.sh", "helm", "helm4", "ct").Output()
	if err != nil {
		t.Fatalf("chart-tools.sh helm helm4 ct: %v", err)
	}
	dir := lastLine(out)
	kind, err := exec.Command("bash", "kind-cli.sh").Output()
	if err != nil {
		t.Fatalf("kind-cli.sh: %v", err)
	}
	for _, c := range []struct {
		bin         string
		args        []string
		printed     *regexp.Regexp // its first group is the version
		mod, module string
	}{
		{filepath.Join(dir, "helm"), []string{"version", "--template", "{{.Version}}"}, regexp.MustCompile(`^(\S+)$`), "hack/tools/helm3", "helm.sh/helm/v3"},
		{filepath.Join(dir, "helm4"), []string{"version", "--template", "{{.Version}}"}, regexp.MustCompile(`^(\S+)$`), "hack/tools/helm4", "helm.sh/helm/v4"},
		{filepath.Join(dir, "ct"), []string{"version"}, regexp.MustCompile(`(?m)^Version:\s+(\S+)$`), "hack/tools/ct", "github.com/helm/chart-testing/v3"},
		{lastLine(kind), []string{"version"}, regexp.MustCompile(`^kind (\S+) `), "e2e", "sigs.k8s.io/kind"},
	} {
		want := toolModuleVersion(t, c.mod, c.module)
		out, err := exec.Command(c.bin, c.args...).Output()
		if err != nil {
			t.Fatalf("%s %v: %v", c.bin, c.args, err)
		}
		m := c.printed.FindStringSubmatch(strings.TrimSpace(string(out)))
		if len(m) < 2 || m[1] != want {
			t.Errorf("%s %v printed %q; %s pins %s", c.bin, c.args, out, c.mod, want)
		}
	}
	// ct's default lint rules and Chart.yaml schema, from its module.
	for _, f := range []string{"lintconf.yaml", "chart_schema.yaml"} {
		if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "ct-etc", f)); err != nil {
			t.Errorf("ct-etc: %v", err)
		}
	}
}
