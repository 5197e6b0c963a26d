package chart

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden file and the kustomize base")

const chartDir = "../mesh-cni"

func TestDefaultRenderGolden(t *testing.T) {
	r, err := Render(chartDir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "default.golden.yaml")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(r.Manifest), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go -C charts test ./chart -update)", err)
	}
	if r.Manifest != string(want) {
		t.Errorf("default render differs from %s (rerun with -update if intended):\n%s", golden, testenv.FirstDiff(string(want), r.Manifest))
	}
}
