package hack

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// The release tools, built once and cached by hack/build-tools.sh (make
// release-tools builds them before make test-unit).
func releaseTools(t *testing.T) (tools, helm string) {
	t.Helper()
	out, err := exec.Command("bash", "build-tools.sh", "crane", "cosign", "registry").Output()
	if err != nil {
		t.Fatalf("build-tools.sh: %v", err)
	}
	tools = lastLine(out)
	out, err = exec.Command("bash", "chart-tools.sh", "helm").Output()
	if err != nil {
		t.Fatalf("chart-tools.sh helm: %v", err)
	}
	return tools, filepath.Join(lastLine(out), "helm")
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// startRegistry serves the reference registry (distribution, the code of
// registry:2) on loopback with its storage in a temp dir.
func startRegistry(t *testing.T, tools string) string {
	t.Helper()
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.HostPort(t))
	conf := fmt.Sprintf("version: 0.1\nlog: {level: warn}\nstorage: {filesystem: {rootdirectory: %s}}\nhttp: {addr: %s}\n",
		filepath.Join(dir, "data"), addr)
	if err := os.WriteFile(filepath.Join(dir, "config.yml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cmd := exec.Command(filepath.Join(tools, "registry"), "serve", filepath.Join(dir, "config.yml"))
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	testenv.Eventually(t, "registry at "+addr, func() error {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /v2/: %s (log: %s)", resp.Status, logs.String())
		}
		return nil
	})
	return addr
}

func readEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	env := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), "="); ok {
			env[k] = v
		}
	}
	return env
}

// make release against a fresh registry: two-platform indexes, signatures
// that verify (and fail on what was not signed), the chart from oci:// with
// the digest pinned, SBOMs, and stamped binaries for both architectures.
func TestRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the release builds binaries for two platforms")
	}
	r := runRelease(t)
	t.Run("index lists both platforms", func(t *testing.T) { checkIndex(t, r) })
	t.Run("signatures verify", func(t *testing.T) { checkSignatures(t, r) })
	t.Run("unsigned or tampered is refused", func(t *testing.T) { checkRefusals(t, r) })
	t.Run("chart from oci pins the digest", func(t *testing.T) { checkChartPins(t, r) })
	t.Run("docs commands against the release", func(t *testing.T) { releaseDocs(t, r.env, r.tools, r.helm, r.run) })
	t.Run("SBOM per platform", func(t *testing.T) { checkSBOMs(t, r) })
	t.Run("krew manifest with the CLI for both platforms", func(t *testing.T) { checkKrewCLI(t, r) })
	t.Run("binaries stamped for both platforms", func(t *testing.T) { checkStamps(t, r) })
}

// release is one run of release.sh into a local registry: what it wrote
// (release.env, OUT) and the tools to inspect it.
type release struct {
	ctx             context.Context
	env             map[string]string // release.env
	reg, out        string            // the registry's host:port; release.sh's OUT
	tools, helm     string
	crane, cosign   string
	version, commit string
	image, chart    string // references by digest
}

// runRelease runs release.sh against a fresh registry and checks that its
// release.env names this tree's version and a commit.
func runRelease(t *testing.T) *release {
	tools, helm := releaseTools(t)
	reg := startRegistry(t, tools)
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Scale(8*time.Minute))
	t.Cleanup(cancel)
	rel := exec.CommandContext(ctx, "bash", "release.sh")
	rel.Env = append(os.Environ(), "REGISTRY="+reg, "OUT="+out)
	start := time.Now()
	if b, err := rel.CombinedOutput(); err != nil {
		t.Fatalf("release.sh: %v\n%s", err, b)
	}
	t.Logf("release.sh took %s", time.Since(start).Round(time.Second))
	env := readEnv(t, filepath.Join(out, "release.env"))
	version, commit := env["VERSION"], env["COMMIT"]
	if v, _ := os.ReadFile("../VERSION"); version != strings.TrimSpace(string(v)) || commit == "" {
		t.Fatalf("release.env: VERSION %q COMMIT %q", version, commit)
	}
	return &release{
		ctx: ctx, env: env, reg: reg, out: out, tools: tools, helm: helm,
		crane: filepath.Join(tools, "crane"), cosign: filepath.Join(tools, "cosign"),
		version: version, commit: commit,
		image: reg + "/mesh-cni@" + env["IMAGE_DIGEST"], chart: reg + "/charts/mesh-cni@" + env["CHART_DIGEST"],
	}
}

func (r *release) run(name string, args ...string) (string, error) {
	cmd := exec.CommandContext(r.ctx, name, args...)
	cmd.Env = append(os.Environ(), "COSIGN_PASSWORD=")
	b, err := cmd.CombinedOutput()
	return string(b), err
}

func (r *release) must(t *testing.T, name string, args ...string) string {
	t.Helper()
	s, err := r.run(name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, s)
	}
	return s
}

// verify is cosign verify with the release's key.
func (r *release) verify(ref string, extra ...string) (string, error) {
	return r.run(r.cosign, append([]string{"verify", "--key", r.env["COSIGN_PUB"], "--insecure-ignore-tlog=true"}, append(extra, ref)...)...)
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
