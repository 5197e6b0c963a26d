package hack

import (
	"os/exec"
	"strings"
	"testing"
)

// hack/lanes.sh runs every lane to its end, prefixes each lane's lines
// with its name and fails when one lane failed, naming it and repeating
// what failed at the end (a CI log is often read from its tail).
func TestLanes(t *testing.T) {
	out, err := exec.Command("bash", "lanes.sh",
		"slow", "sleep 0.5; echo done; echo to stderr >&2",
		"broken", "echo trying; echo '    x_test.go:7: the reason'; echo '--- FAIL: TestX (0.01s)'; echo after; exit 3",
		"quiet", "echo last words; exit 4").CombinedOutput()
	got := string(out)
	if err == nil {
		t.Fatalf("exit 0 with a failed lane:\n%s", got)
	}
	for _, want := range []string{
		"[slow] done\n", "[slow] to stderr\n", "[broken] trying\n",
		"lane slow: ok in", "lane broken: FAILED (exit status 3) in",
		"lane quiet: FAILED (exit status 4) in",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	// The tail: each failed lane's failure lines (or, without any, its
	// last lines), unprefixed, then the summary.
	_, tail, _ := strings.Cut(got, "--- lane broken: what failed\n")
	if want := "    x_test.go:7: the reason\n--- FAIL: TestX (0.01s)\n--- lane quiet: what failed\nlast words\nlane slow: ok in"; !strings.HasPrefix(tail, want) {
		t.Errorf("the tail after the lanes' output is not what failed:\n%s\nwant it to start with:\n%s", tail, want)
	}
	if out, err := exec.Command("bash", "lanes.sh", "a", "true", "b", "echo ok").CombinedOutput(); err != nil {
		t.Errorf("every lane ok, got %v:\n%s", err, out)
	}
}
