package docsection

import (
	"os"
	"path/filepath"
	"testing"
)

// Another benchmark's section is kept; ours is replaced in place or
// appended; a lone or reversed marker is refused with the file untouched.
func TestWrite(t *testing.T) {
	const name = "bench-cluster"
	StartMarker, EndMarker := Markers(name)
	dir := t.TempDir()
	path := filepath.Join(dir, "benchmarks.md")
	other := "# Benchmarks\n\n<!-- bench-plugin:start -->\nplugin figures\n<!-- bench-plugin:end -->\n\n## After\n\nkept\n"
	if err := os.WriteFile(path, []byte(other), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, name, "first\n"); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, name, "second\n"); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	want := other + "\n" + StartMarker + "\nsecond\n" + EndMarker + "\n"
	if string(got) != want {
		t.Errorf("after two writes:\n%s\nwant:\n%s", got, want)
	}

	// Replaced in place, with what follows the section kept.
	mid := "# B\n\n" + StartMarker + "\nold\n" + EndMarker + "\n\n## Next\n"
	if err := os.WriteFile(path, []byte(mid), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, name, "new\n"); err != nil {
		t.Fatal(err)
	}
	got, _ = os.ReadFile(path)
	if want := "# B\n\n" + StartMarker + "\nnew\n" + EndMarker + "\n\n## Next\n"; string(got) != want {
		t.Errorf("replaced in place:\n%q\nwant\n%q", got, want)
	}

	// A lone or reversed marker: refused, file untouched.
	for _, bad := range []string{"x\n" + StartMarker + "\nhalf\n", EndMarker + "\n" + StartMarker + "\n"} {
		if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := Write(path, name, "s\n"); err == nil {
			t.Errorf("no error for %q", bad)
		}
		if got, _ := os.ReadFile(path); string(got) != bad {
			t.Errorf("file changed to %q", got)
		}
	}

	// No file yet: a new document.
	fresh := filepath.Join(dir, "new.md")
	if err := Write(fresh, name, "s\n"); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(fresh); string(got) != "# Benchmarks\n\n"+StartMarker+"\ns\n"+EndMarker+"\n" {
		t.Errorf("fresh file: %q", got)
	}
}
