package hack

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The repository's .golangci.yml is the one make lint applies, and it can
// fail: golangci-lint with it rejects a package that drops an error
// (errcheck, a default linter) and compares one with == (errorlint, on only
// through the file), and passes the same package fixed.
func TestLintConfigFails(t *testing.T) {
	out, err := exec.Command("bash", "build-tools.sh", "golangci-lint").Output()
	if err != nil {
		t.Skipf("golangci-lint cannot be built here (bash hack/build-tools.sh golangci-lint: %v)", err)
	}
	lint := filepath.Join(lastLine(out), "golangci-lint")
	config, err := filepath.Abs("../.golangci.yml")
	if err != nil {
		t.Fatal(err)
	}

	const bad = `package probe

import (
	"io"
	"os"
)

func Write() { os.WriteFile("x", nil, 0o644) }

func AtEnd(err error) bool { return err == io.EOF }
`
	const good = `package probe

import (
	"errors"
	"io"
	"os"
)

func Write() error { return os.WriteFile("x", nil, 0o644) }

func AtEnd(err error) bool { return errors.Is(err, io.EOF) }
`
	run := func(src string) (string, error) {
		dir := t.TempDir()
		for name, text := range map[string]string{"go.mod": "module probe\n\ngo 1.26\n", "probe.go": src} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		// Waits for another golangci-lint on this machine instead of failing.
		cmd := exec.Command(lint, "run", "--allow-serial-runners", "--config", config, "./...")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOPROXY=off", "GOTOOLCHAIN=local")
		b, err := cmd.CombinedOutput()
		return string(b), err
	}

	got, err := run(bad)
	if err == nil {
		t.Fatalf("golangci-lint passed a package with an unchecked error and an == comparison:\n%s", got)
	}
	for _, l := range []string{"(errcheck)", "(errorlint)"} {
		if !strings.Contains(got, l) {
			t.Errorf("golangci-lint's findings do not name %s:\n%s", l, got)
		}
	}
	if got, err := run(good); err != nil {
		t.Errorf("golangci-lint failed the fixed package: %v\n%s", err, got)
	}
}
