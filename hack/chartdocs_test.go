package hack

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// The chart's README is what helm-docs makes of README.md.gotmpl and
// values.yaml: a value added or documented without make chart-readme fails
// here, with the command that fixes it.
func TestChartReadmeGenerated(t *testing.T) {
	out, err := exec.Command("bash", "build-tools.sh", "helm-docs").Output()
	if err != nil {
		t.Fatalf("build-tools.sh helm-docs: %v", err)
	}
	cmd := exec.Command(filepath.Join(lastLine(out), "helm-docs"), helmDocsArgs("../charts/mesh-cni", "--dry-run")...)
	var stderr []byte
	got, err := cmd.Output()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		stderr = ee.Stderr
	}
	if err != nil {
		t.Fatalf("helm-docs: %v\n%s", err, stderr)
	}
	want, err := os.ReadFile("../charts/mesh-cni/README.md")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("charts/mesh-cni/README.md is not what helm-docs makes of README.md.gotmpl and values.yaml: run make chart-readme (README.md -, helm-docs +)\n%s",
			testenv.FirstDiff(string(want), string(got)))
	}
}

// helmDocsArgs are make chart-readme's flags (values in file order).
func helmDocsArgs(chart string, extra ...string) []string {
	return append([]string{"--chart-search-root", chart, "--sort-values-order", "file", "--log-level", "warning"}, extra...)
}
