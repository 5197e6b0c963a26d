package hack

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeGo is a stand-in for the go command (the real builds take minutes):
// it logs each call, remembers `go get` per module dir, and makes `go build`
// write the -o file with what was fetched there, so a test sees which
// binaries a script built and from which version. `go list -m ... MODULE`
// prints the version go.mod in the dir requires (v0.0.0-fake if none).
const fakeGo = `#!/usr/bin/env bash
echo "$PWD: $*" >>"$FAKE_GO_LOG"
case "$1" in
env) case "$2" in GOVERSION) echo "${FAKE_GOVERSION:-go1.26.0}" ;; GOMODCACHE) echo /nonexistent ;; esac ;;
list)
  v=$(sed -n "s|^[[:space:]]*${!#} \(v[^ ]*\).*|\1|p" go.mod 2>/dev/null | head -n1)
  echo "${v:-v0.0.0-fake}" ;;
mod) if [ "$2" = init ]; then echo "module $3" >go.mod; fi ;;
get) echo "$2" >>.fake-got ;;
build)
  [ "${FAKE_GO_FAIL:-}" = build ] && { echo "fake build failure" >&2; exit 1; }
  prev= out=
  for a in "$@"; do [ "$prev" = -o ] && out=$a; prev=$a; done
  mkdir -p "$(dirname "$out")"
  { echo "from: $(cat .fake-got 2>/dev/null | tr '\n' ' ')"; echo "args: $*"; } >"$out"
  chmod +x "$out" ;;
esac
`

type scriptEnv struct {
	t     *testing.T
	goDir string // holds the fake go
	cache string
	log   string
	env   []string
}

func newScriptEnv(t *testing.T) *scriptEnv {
	t.Helper()
	dir := t.TempDir()
	goBin := filepath.Join(dir, "go")
	if err := os.WriteFile(goBin, []byte(fakeGo), 0o755); err != nil {
		t.Fatal(err)
	}
	s := &scriptEnv{t: t, goDir: dir, cache: filepath.Join(dir, "cache"), log: filepath.Join(dir, "go.log")}
	s.env = append(os.Environ(), "GO="+goBin, "MESH_CNI_CACHE="+s.cache, "FAKE_GO_LOG="+s.log)
	return s
}

// run runs a hack script with extra environment and returns the names of
// the binaries it built (the base of each `go build -o`).
func (s *scriptEnv) run(script string, env []string, args ...string) ([]string, error) {
	s.t.Helper()
	_ = os.Remove(s.log)
	cmd := exec.Command("bash", append([]string{script}, args...)...)
	cmd.Env = append(append([]string{}, s.env...), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		s.t.Logf("%s %v: %s", script, args, out)
	}
	b, _ := os.ReadFile(s.log)
	var built []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[1] != "build" {
			continue
		}
		for i, a := range f {
			if a == "-o" && i+1 < len(f) {
				built = append(built, strings.TrimPrefix(filepath.Base(f[i+1]), "."))
			}
		}
	}
	return built, err
}

func (s *scriptEnv) content(path string) string {
	b, err := os.ReadFile(filepath.Join(s.cache, path))
	if err != nil {
		s.t.Fatal(err)
	}
	return string(b)
}

func expectBuilt(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("%s: built %q, want %q", what, got, want)
	}
}

// A new etcd or Go version rebuilds etcd; the same inputs build nothing.
func TestBuildK8sKeysEtcd(t *testing.T) {
	s := newScriptEnv(t)
	const bin = "k8s/v1.34.4/bin/etcd"
	v1 := []string{"K8S_VERSION=v1.34.4", "ETCD_VERSION=v3.6.8"}
	built, err := s.run("build-k8s.sh", v1, "etcd")
	if err != nil {
		t.Fatal(err)
	}
	expectBuilt(t, "first run", built, "etcd.tmp")
	if c := s.content(bin); !strings.Contains(c, "@v3.6.8") {
		t.Fatalf("etcd built from %q", c)
	}
	built, _ = s.run("build-k8s.sh", v1, "etcd")
	expectBuilt(t, "same inputs", built)

	v2 := []string{"K8S_VERSION=v1.34.4", "ETCD_VERSION=v3.6.9"}
	built, _ = s.run("build-k8s.sh", v2, "etcd")
	expectBuilt(t, "new ETCD_VERSION", built, "etcd.tmp")
	if c := s.content(bin); !strings.Contains(c, "@v3.6.9") || strings.Contains(c, "@v3.6.8") {
		t.Fatalf("after the bump etcd is built from %q", c)
	}
	built, _ = s.run("build-k8s.sh", append(v2, "FAKE_GOVERSION=go1.99.0"), "etcd")
	expectBuilt(t, "new Go version", built, "etcd.tmp")
}

// A failed build leaves neither a half-written binary nor temp dirs.
func TestBuildK8sCleansUpOnFailure(t *testing.T) {
	s := newScriptEnv(t)
	if _, err := s.run("build-k8s.sh", []string{"ETCD_VERSION=v3.6.8", "FAKE_GO_FAIL=build"}, "etcd"); err == nil {
		t.Fatal("a failed build exited 0")
	}
	var left []string
	_ = filepath.Walk(s.cache, func(p string, fi os.FileInfo, err error) error {
		if err == nil && (strings.Contains(p, ".tmp") || strings.Contains(p, ".out-")) {
			left = append(left, p)
		}
		return nil
	})
	if len(left) > 0 {
		t.Fatalf("left behind: %q", left)
	}
	if _, err := os.Stat(filepath.Join(s.cache, "k8s/v1.34.4/bin/etcd")); err == nil {
		t.Fatal("an etcd binary exists after the failed build")
	}
}

// A new containerd version rebuilds exactly the containerd binaries of the
// node image, a new runc version runc alone; the rest is reused.
func TestKindImageKeysBinaries(t *testing.T) {
	s := newScriptEnv(t)
	all := []string{"containerd", "ctr", "containerd-shim-runc-v2", "runc",
		"cni-host-local", "cni-loopback", "cni-ptp", "cni-bridge", "cni-portmap", "coredns", "pause"}
	v1 := []string{"CONTAINERD_VERSION=v2.1.5"}
	built, err := s.run("kind-image.sh", v1, "binaries")
	if err != nil {
		t.Fatal(err)
	}
	expectBuilt(t, "first run", built, all...)
	built, _ = s.run("kind-image.sh", v1, "binaries")
	expectBuilt(t, "same inputs", built)

	built, _ = s.run("kind-image.sh", []string{"CONTAINERD_VERSION=v2.1.6"}, "binaries")
	expectBuilt(t, "new CONTAINERD_VERSION", built, "containerd", "ctr", "containerd-shim-runc-v2")
	if c := s.content("kind/bin/containerd"); !strings.Contains(c, "@v2.1.6") {
		t.Fatalf("containerd built from %q", c)
	}
	built, _ = s.run("kind-image.sh", []string{"CONTAINERD_VERSION=v2.1.6", "COREDNS_VERSION=v1.12.2"}, "binaries")
	expectBuilt(t, "new COREDNS_VERSION", built, "coredns")
	built, _ = s.run("kind-image.sh", []string{"CONTAINERD_VERSION=v2.1.6", "COREDNS_VERSION=v1.12.2", "RUNC_VERSION=v1.3.7"}, "binaries")
	expectBuilt(t, "new RUNC_VERSION", built, "runc")
	if c := s.content("kind/bin/runc"); !strings.Contains(c, "@v1.3.7") {
		t.Fatalf("runc built from %q", c)
	}
}

// A chart tool built on a machine without it (an empty cache) exits 0 and
// prints its dir, made whole (no temp dir left), holding helm built with the
// version hack/tools/helm3/go.mod pins.
func TestChartToolsBuildsFromEmpty(t *testing.T) {
	s := newScriptEnv(t)
	cmd := exec.Command("bash", "chart-tools.sh", "helm")
	cmd.Env = s.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("chart-tools.sh helm on an empty cache: %v\n%s", err, out)
	}
	dir := lastLine(out)
	if !strings.HasPrefix(dir, filepath.Join(s.cache, "chart-tools")+"/") {
		t.Fatalf("output does not end with a dir under the cache's chart-tools:\n%s", out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "helm"))
	if err != nil {
		t.Fatal(err)
	}
	want := "-X helm.sh/helm/v3/internal/version.version=" + toolModuleVersion(t, "hack/tools/helm3", "helm.sh/helm/v3") + " "
	if !strings.Contains(string(b), want) {
		t.Fatalf("helm built with %q, want %q in it", b, want)
	}
	left, _ := filepath.Glob(filepath.Join(s.cache, "chart-tools", ".new-*"))
	if len(left) > 0 {
		t.Fatalf("temp dirs left: %q", left)
	}
}

// A tool's build is keyed by its module's go.mod and go.sum: the same files
// build nothing, a change to either builds it again into a dir of its own,
// and helm's version flag follows the version go.mod requires.
func TestBuildToolsKeyedByModule(t *testing.T) {
	s := newScriptEnv(t)
	root := t.TempDir()
	mod := filepath.Join(root, "hack", "tools", "helm3")
	if err := os.MkdirAll(mod, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"build-tools.sh", "tools/helm3/go.mod", "tools/helm3/go.sum"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "hack", f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	build := func(what string, wantBuilt bool) {
		t.Helper()
		built, err := s.run(filepath.Join(root, "hack", "build-tools.sh"), nil, "helm")
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if (len(built) > 0) != wantBuilt {
			t.Fatalf("%s: built %q, want a build: %v", what, built, wantBuilt)
		}
	}
	dirs := func() []string {
		d, _ := filepath.Glob(filepath.Join(s.cache, "helm3", "*", "bin", "helm"))
		return d
	}
	build("first build", true)
	build("same go.mod and go.sum", false)
	edit := func(file, from, to string) {
		t.Helper()
		p := filepath.Join(mod, file)
		b, _ := os.ReadFile(p)
		if !strings.Contains(string(b), from) {
			t.Fatalf("%s has no %q", file, from)
		}
		if err := os.WriteFile(p, []byte(strings.Replace(string(b), from, to, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	edit("go.sum", "h1:", "h1:A")
	build("changed go.sum", true)
	if n := len(dirs()); n != 2 {
		t.Fatalf("after a go.sum change: %d helm builds, want 2", n)
	}
	v := toolModuleVersion(t, "hack/tools/helm3", "helm.sh/helm/v3")
	edit("go.mod", "helm.sh/helm/v3 "+v, "helm.sh/helm/v3 v3.0.0-bumped")
	build("changed go.mod", true)
	found := false
	for _, d := range dirs() {
		b, _ := os.ReadFile(d)
		found = found || strings.Contains(string(b), "version.version=v3.0.0-bumped ")
	}
	if n := len(dirs()); n != 3 || !found {
		t.Fatalf("after a go.mod bump: %d helm builds (want 3), one with the bumped version: %v", n, found)
	}
}

// golangci-lint is built from its own module (hack/lint) into its own cache
// set, the release tools from hack/tools, each chart tool from its module
// under hack/tools, kind from e2e; one call never mixes two modules.
func TestBuildToolsModules(t *testing.T) {
	s := newScriptEnv(t)
	for _, c := range []struct{ tool, mod, set string }{
		{"golangci-lint", "hack/lint", "lint-tools"},
		{"crane", "hack/tools", "release-tools"},
		{"helm", "hack/tools/helm3", "helm3"},
		{"helm4", "hack/tools/helm4", "helm4"},
		{"ct", "hack/tools/ct", "ct"},
		{"kind", "e2e", "kind-cli"},
	} {
		cmd := exec.Command("bash", "build-tools.sh", c.tool)
		cmd.Env = s.env
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("build-tools.sh %s: %v", c.tool, err)
		}
		dir := lastLine(out)
		if filepath.Base(filepath.Dir(filepath.Dir(dir))) != c.set {
			t.Errorf("%s landed in %s, want a dir under %s", c.tool, dir, c.set)
		}
		log, _ := os.ReadFile(s.log)
		if !strings.Contains(string(log), c.mod+": build") {
			t.Errorf("%s was not built in %s:\n%s", c.tool, c.mod, log)
		}
		_ = os.Remove(s.log)
	}
	cmd := exec.Command("bash", "build-tools.sh", "crane", "golangci-lint")
	cmd.Env = s.env
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "two calls") {
		t.Errorf("a call naming tools of both modules: err %v, output %s", err, out)
	}
}
