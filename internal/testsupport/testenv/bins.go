package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// KubernetesVersion is the version hack/versions.env pins (a test checks it).
const KubernetesVersion = "v1.34.4"

// BinDir returns the directory holding the Kubernetes binaries:
// $MESH_CNI_K8S_BIN_DIR when set, else the build cache
// ($MESH_CNI_CACHE, default /var/cache/mesh-cni).
func BinDir() string {
	if d := os.Getenv("MESH_CNI_K8S_BIN_DIR"); d != "" {
		return d
	}
	cache := os.Getenv("MESH_CNI_CACHE")
	if cache == "" {
		cache = "/var/cache/mesh-cni"
	}
	return filepath.Join(cache, "k8s", KubernetesVersion, "bin")
}

// ensureBinaries returns the bin dir holding every named component, building
// the missing ones with hack/build-k8s.sh, so a fresh machine works from zero.
func ensureBinaries(names ...string) (string, error) {
	dir := BinDir()
	var missing []string
	for _, n := range names {
		if fi, err := os.Stat(filepath.Join(dir, n)); err != nil || fi.Mode()&0o111 == 0 {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return dir, nil
	}
	if os.Getenv("MESH_CNI_K8S_BIN_DIR") != "" {
		return "", fmt.Errorf("MESH_CNI_K8S_BIN_DIR=%s lacks %s", dir, strings.Join(missing, ", "))
	}
	script, err := findScript()
	if err != nil {
		return "", fmt.Errorf("%s missing in %s and cannot build them: %w", strings.Join(missing, ", "), dir, err)
	}
	fmt.Fprintf(os.Stderr, "testenv: building %s with %s (several minutes the first time)\n", strings.Join(missing, " "), script)
	var out bytes.Buffer
	cmd := exec.Command("bash", append([]string{script}, missing...)...)
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w", script, strings.Join(missing, " "), err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	return lines[len(lines)-1], nil
}

// findScript is the repository's hack/build-k8s.sh.
func findScript() (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "hack", "build-k8s.sh"), nil
}

// Root walks up from the working directory (a test runs in its package's
// directory) to the repository's root: the directory holding
// hack/build-k8s.sh.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "hack", "build-k8s.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("hack/build-k8s.sh not found above the working directory")
		}
		dir = parent
	}
}

// RepoRoot is Root for a test, which fails without one.
func RepoRoot(t testing.TB) string {
	t.Helper()
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// Binary returns the path of a component built by hack/build-k8s.sh
// (kubectl, kubeadm, ...), building it first when it is missing.
func Binary(name string) (string, error) {
	dir, err := ensureBinaries(name)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, name), nil
}
