package hack

import (
	"os/exec"
	"strings"
	"testing"
)

// hack/lanes.sh runs every lane to its end, prefixes each lane's lines
// with its name and fails when one lane failed, naming it.
func TestLanes(t *testing.T) {
	out, err := exec.Command("bash", "lanes.sh",
		"slow", "sleep 0.5; echo done; echo to stderr >&2",
		"broken", "echo trying; exit 3").CombinedOutput()
	got := string(out)
	if err == nil {
		t.Fatalf("exit 0 with a failed lane:\n%s", got)
	}
	for _, want := range []string{
		"[slow] done\n", "[slow] to stderr\n", "[broken] trying\n",
		"lane slow: ok in", "lane broken: FAILED (exit status 3) in",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if out, err := exec.Command("bash", "lanes.sh", "a", "true", "b", "echo ok").CombinedOutput(); err != nil {
		t.Errorf("every lane ok, got %v:\n%s", err, out)
	}
}
