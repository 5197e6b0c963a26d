package hack

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// krewPlugin is the part of krew's Plugin (v1alpha2) the release fills.
type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string `json:"version"`
		Homepage         string `json:"homepage"`
		ShortDescription string `json:"shortDescription"`
		Description      string `json:"description"`
		Platforms        []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			URI    string `json:"uri"`
			Sha256 string `json:"sha256"`
			Bin    string `json:"bin"`
		} `json:"platforms"`
	} `json:"spec"`
}

// checkKrew checks the manifest in dir against its tarballs, and returns
// the binary each tarball holds, by arch.
func checkKrew(t *testing.T, dir, version, uriBase string) map[string][]byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "mesh-cni.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var p krewPlugin
	if err := yaml.UnmarshalStrict(b, &p); err != nil {
		t.Fatalf("krew manifest: %v\n%s", err, b)
	}
	if p.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || p.Kind != "Plugin" || p.Metadata.Name != "mesh-cni" ||
		p.Spec.Version != version || p.Spec.ShortDescription == "" || p.Spec.Description == "" || p.Spec.Homepage == "" {
		t.Errorf("krew manifest: %+v", p)
	}
	bins := map[string][]byte{}
	for _, pl := range p.Spec.Platforms {
		arch := pl.Selector.MatchLabels["arch"]
		name := "kubectl-mesh_cni-" + version + "-linux-" + arch + ".tar.gz"
		if pl.Selector.MatchLabels["os"] != "linux" || pl.Bin != "kubectl-mesh_cni" || pl.URI != uriBase+"/"+name {
			t.Errorf("platform %+v", pl)
		}
		tgz, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(tgz); hex.EncodeToString(sum[:]) != pl.Sha256 {
			t.Errorf("%s: sha256 %x, the manifest says %s", name, sum, pl.Sha256)
		}
		zr, err := gzip.NewReader(bytes.NewReader(tgz))
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(zr)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Name != "kubectl-mesh_cni" || h.Mode&0o111 == 0 || h.Uid != 0 {
				t.Errorf("%s: entry %s mode %o uid %d, want executable kubectl-mesh_cni of root", name, h.Name, h.Mode, h.Uid)
			}
			bins[arch], _ = io.ReadAll(tr)
		}
	}
	if len(bins) != 2 || bins["amd64"] == nil || bins["arm64"] == nil {
		t.Errorf("krew platforms: %v, want linux/amd64 and linux/arm64", len(bins))
	}
	return bins
}

// krew.sh on stand-in binaries: a manifest whose sums match tarballs of
// each platform's binary, the same bytes on a second run.
func TestKrewManifest(t *testing.T) {
	bins, out := t.TempDir(), t.TempDir()
	for _, arch := range []string{"amd64", "arm64"} {
		os.MkdirAll(filepath.Join(bins, "linux-"+arch), 0o755)
		os.WriteFile(filepath.Join(bins, "linux-"+arch, "mesh-cnictl"), []byte("ctl for "+arch), 0o755)
	}
	krew := func(dir string, args ...string) {
		cmd := exec.Command("bash", append([]string{"krew.sh", "v1.2.3", dir, bins}, args...)...)
		cmd.Env = append(os.Environ(), "EPOCH=1700000000")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("krew.sh: %v\n%s", err, b)
		}
	}
	krew(out, "https://example.com/dl")
	got := checkKrew(t, out, "v1.2.3", "https://example.com/dl")
	for arch, b := range got {
		if string(b) != "ctl for "+arch {
			t.Errorf("%s tarball holds %q", arch, b)
		}
	}
	again := t.TempDir()
	krew(again, "https://example.com/dl")
	a, _ := os.ReadFile(filepath.Join(out, "mesh-cni.yaml"))
	b, _ := os.ReadFile(filepath.Join(again, "mesh-cni.yaml"))
	if !bytes.Equal(a, b) {
		t.Errorf("a second run changed the manifest:\n%s\n%s", a, b)
	}
	// The default URI is the release's download URL.
	def := t.TempDir()
	krew(def)
	checkKrew(t, def, "v1.2.3", "https://github.com/mesh-cni/mesh-cni/releases/download/v1.2.3")
	if m, _ := os.ReadFile(filepath.Join(def, "mesh-cni.yaml")); !strings.Contains(string(m), "kind: Plugin") {
		t.Errorf("manifest:\n%s", m)
	}
}
