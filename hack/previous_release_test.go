package hack

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// hack/previous-release.sh in a repository of its own: the fallback commit
// before any VERSION bump, then the last commit of the earlier VERSION.
func TestPreviousRelease(t *testing.T) {
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, b)
		}
		return strings.TrimSpace(string(b))
	}
	write := func(name, body string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	commit := func(msg string) string {
		t.Helper()
		git("add", "-A")
		git("commit", "-qm", msg)
		return git("rev-parse", "HEAD")
	}
	prev := func() string {
		t.Helper()
		b, err := exec.Command("bash", filepath.Join(dir, "hack", "previous-release.sh")).CombinedOutput()
		if err != nil {
			t.Fatalf("previous-release.sh: %v\n%s", err, b)
		}
		return strings.TrimSpace(string(b))
	}
	script, err := os.ReadFile("previous-release.sh")
	if err != nil {
		t.Fatal(err)
	}
	git("init", "-q")
	write("hack/previous-release.sh", string(script))
	write("README", "a\n")
	commit("before VERSION")
	write("VERSION", "v0.1.0\n")
	write("hack/previous-release", "1111111111111111111111111111111111111111\n")
	commit("v0.1.0")
	write("README", "b\n")
	release := commit("last of v0.1.0")
	if got := prev(); got != "1111111111111111111111111111111111111111" {
		t.Errorf("before any bump: %q, want hack/previous-release's commit", got)
	}
	write("VERSION", "v0.2.0\n")
	commit("bump to v0.2.0")
	write("README", "c\n")
	commit("work on v0.2.0")
	if got := prev(); got != release {
		t.Errorf("after the bump: %q, want the last commit of v0.1.0 %s", got, release)
	}
}
