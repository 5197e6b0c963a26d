package chart

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		t.Errorf("default render differs from %s (rerun with -update if intended):\n%s", golden, diff(string(want), r.Manifest))
	}
}

// diff shows the first differing lines, enough to see what changed.
func diff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return "line " + itoa(i+1) + ":\n- " + x + "\n+ " + y
		}
	}
	return "(no line differs)"
}

func itoa(i int) string {
	const d = "0123456789"
	if i < 10 {
		return d[i : i+1]
	}
	return itoa(i/10) + d[i%10:i%10+1]
}
