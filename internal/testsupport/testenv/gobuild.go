package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// Module is this repository's Go module path.
const Module = "github.com/mesh-cni/mesh-cni"

var (
	buildsMu  sync.Mutex
	builds    = map[string]func() (string, error){}
	buildDirs []string
)

// GoBinary builds the main package pkg (a path inside this module, e.g.
// "plugin") once per test binary, as name, into a world-readable dir of its
// own, so processes of any UID may run it and a CNI plugin path may point
// at the dir. Static (CGO_ENABLED=0) and -trimpath, as the images ship it.
// Main removes it after the tests.
func GoBinary(t testing.TB, pkg, name string) string {
	t.Helper()
	buildsMu.Lock()
	get, ok := builds[pkg]
	if !ok {
		get = sync.OnceValues(func() (string, error) { return goBuild(pkg, name) })
		builds[pkg] = get
	}
	buildsMu.Unlock()
	path, err := get()
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// PluginDir builds the plugin (mesh-cni) and beside it mesh-cni-podget,
// the helper it execs for its API-server lookup, as the agent installs
// them: once per test binary, into a world-readable dir, for a CNI plugin
// path. Main removes it after the tests.
func PluginDir(t testing.TB) string {
	t.Helper()
	dir, err := pluginDir()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

var pluginDir = sync.OnceValues(func() (string, error) {
	dir, err := binDir()
	if err != nil {
		return "", err
	}
	for pkg, name := range map[string]string{"plugin": "mesh-cni", "cmd/mesh-cni-podget": "mesh-cni-podget"} {
		if err := buildInto(dir, pkg, name); err != nil {
			return "", err
		}
	}
	return dir, nil
})

// builtBinary is the path of pkg when a test has built it.
func builtBinary(pkg string) (string, bool) {
	buildsMu.Lock()
	get, ok := builds[pkg]
	buildsMu.Unlock()
	if !ok {
		return "", false
	}
	path, err := get()
	return path, err == nil
}

func goBuild(pkg, name string) (string, error) {
	dir, err := binDir()
	if err != nil {
		return "", err
	}
	if err := buildInto(dir, pkg, name); err != nil {
		return "", err
	}
	return filepath.Join(dir, name), nil
}

// binDir makes a world-readable temp dir that Main removes.
func binDir() (string, error) {
	dir, err := os.MkdirTemp("", "mesh-cni-bin-")
	if err == nil {
		buildsMu.Lock()
		buildDirs = append(buildDirs, dir)
		buildsMu.Unlock()
		err = os.Chmod(dir, 0o755)
	}
	return dir, err
}

func buildInto(dir, pkg, name string) error {
	build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(dir, name), Module+"/"+pkg)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	// In the product module whichever module's test asks (charts, e2e): the
	// binary gets the product's own dependency versions, as it ships.
	if root, err := Root(); err == nil {
		build.Dir = root
	}
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %w\n%s", pkg, err, out)
	}
	return nil
}

func removeBinaries() {
	buildsMu.Lock()
	defer buildsMu.Unlock()
	for _, d := range buildDirs {
		os.RemoveAll(d)
	}
	buildDirs = nil
}
