package rbac

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// The templates this package's doc and README name exist: a renamed
// template leaves no stale pointer.
func TestCitedTemplatesExist(t *testing.T) {
	name := regexp.MustCompile("(?:templates/|`)([a-z*-]+\\.yaml)")
	for _, f := range []string{"doc.go", "README.md"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range name.FindAllStringSubmatch(string(b), -1) {
			if got, _ := filepath.Glob(filepath.Join(chartDir, "templates", m[1])); len(got) == 0 {
				t.Errorf("%s names %s: no such template in %s/templates", f, m[1], chartDir)
			}
		}
	}
}
