package rules

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func TestGolden(t *testing.T) {
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			got := render(Generate(sc.spec))
			path := filepath.Join("testdata", sc.name+".golden")
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./internal/rules -update)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs from the golden file (go test ./internal/rules -update to accept):\n%s", path, got)
			}
		})
	}
}

// TestGenerateIsPure: same input, same output, and the input is not
// modified by normalisation.
func TestGenerateIsPure(t *testing.T) {
	for _, sc := range scenarios() {
		before := render(Generate(sc.spec))
		if after := render(Generate(sc.spec)); before != after {
			t.Errorf("%s: two Generate calls differ", sc.name)
		}
	}
	s := linkerdSpec(v4)
	s.IgnoreInbound = ports("9000", "80")
	Generate(s)
	if s.IgnoreInbound[0].First != 9000 {
		t.Errorf("Generate modified its input: %v", s.IgnoreInbound)
	}
}
