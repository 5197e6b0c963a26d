package hack

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// checkIndex checks that the index lists both platforms' images, each as the
// Dockerfile builds it.
func checkIndex(t *testing.T, r *release) {
	env, reg, version, crane := r.env, r.reg, r.version, r.crane
	var idx struct {
		MediaType string `json:"mediaType"`
		Manifests []struct {
			Digest   string `json:"digest"`
			Size     int64  `json:"size"`
			Platform struct {
				OS           string `json:"os"`
				Architecture string `json:"architecture"`
			} `json:"platform"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal([]byte(r.must(t, crane, "manifest", reg+"/mesh-cni:"+version)), &idx); err != nil {
		t.Fatal(err)
	}
	if idx.MediaType != "application/vnd.oci.image.index.v1+json" {
		t.Errorf("media type %q, want an OCI image index", idx.MediaType)
	}
	got := map[string]string{}
	for _, m := range idx.Manifests {
		got[m.Platform.OS+"/"+m.Platform.Architecture] = m.Digest
	}
	for _, p := range []string{"linux/amd64", "linux/arm64"} {
		d := got[p]
		if d == "" {
			t.Errorf("index has no %s image: %v", p, got)
			continue
		}
		if want := env["IMAGE_DIGEST_"+strings.ToUpper(strings.TrimPrefix(p, "linux/"))]; d != want {
			t.Errorf("%s: digest %s, release.env says %s", p, d, want)
		}
		// As the Dockerfile's image: the binaries at /, the agent as entrypoint, root.
		var cfg struct {
			Architecture string `json:"architecture"`
			Config       struct {
				Entrypoint []string `json:"Entrypoint"`
				User       string   `json:"User"`
			} `json:"config"`
		}
		if err := json.Unmarshal([]byte(r.must(t, crane, "config", reg+"/mesh-cni@"+d)), &cfg); err != nil {
			t.Fatal(err)
		}
		if cfg.Architecture != strings.TrimPrefix(p, "linux/") || strings.Join(cfg.Config.Entrypoint, " ") != "/mesh-cni-agent" || cfg.Config.User != "0:0" {
			t.Errorf("%s config: %+v", p, cfg)
		}
		files := r.must(t, "bash", "-c", fmt.Sprintf("%q export %q - | tar -t", crane, reg+"/mesh-cni@"+d))
		for _, f := range []string{"mesh-cni", "mesh-cni-podget", "mesh-cni-agent", "mesh-cni-metrics-proxy", "mesh-cni-validator", "mesh-cnictl"} {
			if !strings.Contains("\n"+files, "\n"+f+"\n") && !strings.Contains("\n"+files, "\n./"+f+"\n") {
				t.Errorf("%s image has no /%s:\n%s", p, f, files)
			}
		}
		var man struct {
			Layers []struct {
				Size int64 `json:"size"`
			} `json:"layers"`
		}
		if err := json.Unmarshal([]byte(r.must(t, crane, "manifest", reg+"/mesh-cni@"+d)), &man); err != nil {
			t.Fatal(err)
		}
		var size int64
		for _, l := range man.Layers {
			size += l.Size
		}
		t.Logf("%s image: %.1f MB compressed", p, float64(size)/1e6)
	}
}

// checkSignatures checks that the image, the chart and each platform's SBOM
// attestation verify with the release key.
func checkSignatures(t *testing.T, r *release) {
	env, reg, image, chart, cosign, pub := r.env, r.reg, r.image, r.chart, r.cosign, r.env["COSIGN_PUB"]
	for _, ref := range []string{image, chart} {
		if s, err := r.verify(ref); err != nil {
			t.Errorf("cosign verify %s: %v\n%s", ref, err, s)
		}
	}
	for _, arch := range []string{"AMD64", "ARM64"} {
		ref := reg + "/mesh-cni@" + env["IMAGE_DIGEST_"+arch]
		s, err := r.run(cosign, "verify-attestation", "--key", pub, "--insecure-ignore-tlog=true", "--type", "spdxjson", ref)
		if err != nil {
			t.Errorf("cosign verify-attestation (SBOM) %s: %v\n%s", ref, err, s)
		}
	}
}

// checkRefusals checks that cosign refuses a tampered image, another key and
// an unsigned chart.
func checkRefusals(t *testing.T, r *release) {
	env, reg, version, image, chart, ctx, crane, cosign := r.env, r.reg, r.version, r.image, r.chart, r.ctx, r.crane, r.cosign
	// An image changed after signing (a label added) has another digest
	// and no signature.
	tampered := reg + "/mesh-cni:tampered"
	r.must(t, crane, "mutate", "-l", "tampered=yes", reg+"/mesh-cni:"+version+"-linux-amd64", "-t", tampered)
	if s, err := r.verify(tampered); err == nil {
		t.Errorf("cosign verify passed for a tampered image:\n%s", s)
	}
	// The signed index checked with another key.
	other := t.TempDir()
	cmd := exec.CommandContext(ctx, cosign, "generate-key-pair")
	cmd.Dir, cmd.Env = other, append(os.Environ(), "COSIGN_PASSWORD=")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("generate-key-pair: %v\n%s", err, b)
	}
	if s, err := r.run(cosign, "verify", "--key", filepath.Join(other, "cosign.pub"), "--insecure-ignore-tlog=true", image); err == nil {
		t.Errorf("cosign verify passed with a key that did not sign:\n%s", s)
	}
	// A chart pushed by hand, not signed.
	r.must(t, crane, "copy", chart, reg+"/charts/unsigned:"+env["CHART_VERSION"])
	if s, err := r.verify(reg + "/charts/unsigned:" + env["CHART_VERSION"]); err == nil {
		t.Errorf("cosign verify passed for an unsigned chart:\n%s", s)
	}
}

// checkChartPins checks that the chart pulled from the registry runs the
// released image by digest.
func checkChartPins(t *testing.T, r *release) {
	env, reg, helm, version, image := r.env, r.reg, r.helm, r.version, r.image
	dir := t.TempDir()
	r.must(t, helm, "pull", env["CHART"], "--version", env["CHART_VERSION"], "--plain-http", "--untar", "-d", dir)
	values := readFile(t, filepath.Join(dir, "mesh-cni", "values.yaml"))
	for _, want := range []string{"  repository: " + reg + "/mesh-cni\n", "  digest: \"" + env["IMAGE_DIGEST"] + "\"\n"} {
		if !strings.Contains(values, want) {
			t.Errorf("values.yaml lacks %q", want)
		}
	}
	meta := readFile(t, filepath.Join(dir, "mesh-cni", "Chart.yaml"))
	for _, want := range []string{"appVersion: " + version + "\n", "version: " + env["CHART_VERSION"] + "\n",
		"image: " + reg + "/mesh-cni:" + version + "@" + env["IMAGE_DIGEST"] + "\n"} {
		if !strings.Contains(meta, want) {
			t.Errorf("Chart.yaml lacks %q:\n%s", want, meta)
		}
	}
	manifests := r.must(t, helm, "template", "mesh-cni", filepath.Join(dir, "mesh-cni"), "-n", "mesh-cni")
	if n := strings.Count(manifests, "image: "+image+"\n"); n == 0 {
		t.Errorf("rendered chart does not run %s", image)
	}
	if strings.Contains(manifests, "image: mesh-cni:") {
		t.Error("rendered chart still runs an image by tag")
	}
}

// checkSBOMs checks that each platform's SBOM names the binaries and the
// modules linked into them.
func checkSBOMs(t *testing.T, r *release) {
	out, version := r.out, r.version
	for _, arch := range []string{"amd64", "arm64"} {
		var doc struct {
			SPDXVersion string `json:"spdxVersion"`
			Packages    []struct {
				Name string `json:"name"`
			} `json:"packages"`
		}
		p := filepath.Join(out, "sbom", "mesh-cni-"+version+"-linux-"+arch+".spdx.json")
		if err := json.Unmarshal([]byte(readFile(t, p)), &doc); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		names := map[string]bool{}
		for _, p := range doc.Packages {
			names[p.Name] = true
		}
		if doc.SPDXVersion != "SPDX-2.3" || !names["mesh-cni-agent"] || !names["github.com/containernetworking/cni"] || !names["stdlib"] {
			t.Errorf("%s: %s, %d packages, want the binaries and their modules", p, doc.SPDXVersion, len(doc.Packages))
		}
	}
}

// checkKrewCLI checks that the krew manifest's tarballs hold the released
// mesh-cnictl.
func checkKrewCLI(t *testing.T, r *release) {
	env, out, version := r.env, r.out, r.version
	if env["KREW_MANIFEST"] != filepath.Join(out, "krew", "mesh-cni.yaml") {
		t.Errorf("release.env: KREW_MANIFEST=%q", env["KREW_MANIFEST"])
	}
	bins := checkKrew(t, filepath.Join(out, "krew"), version, "https://github.com/mesh-cni/mesh-cni/releases/download/"+version)
	for arch, b := range bins {
		built, err := os.ReadFile(filepath.Join(out, "bin", "linux-"+arch, "mesh-cnictl"))
		if err != nil || !bytes.Equal(b, built) {
			t.Errorf("%s tarball: not the released mesh-cnictl (%v)", arch, err)
		}
	}
}

// checkStamps checks that the binaries are static, for the right machine,
// and print the release's version and commit.
func checkStamps(t *testing.T, r *release) {
	out, version, commit := r.out, r.version, r.commit
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	for arch, m := range want {
		for _, b := range []string{"mesh-cni", "mesh-cni-agent", "mesh-cnictl"} {
			f, err := elf.Open(filepath.Join(out, "bin", "linux-"+arch, b))
			if err != nil {
				t.Fatal(err)
			}
			if f.Machine != m || f.Section(".interp") != nil {
				t.Errorf("%s/%s: machine %s, interpreter %v: want static %s", arch, b, f.Machine, f.Section(".interp") != nil, m)
			}
			f.Close()
		}
	}
	stamp := func(t *testing.T, prefix []string, arch string) {
		for _, b := range []string{"mesh-cni", "mesh-cni-agent", "mesh-cnictl"} {
			args := append(append([]string{}, prefix[1:]...), filepath.Join(out, "bin", "linux-"+arch, b), "version")
			if b == "mesh-cnictl" {
				args = append(args, "--client") // without it, the agents' too, from a cluster
			}
			s, err := r.run(prefix[0], args...)
			if want := b + " " + version + " (commit " + commit + ")\n"; err != nil || s != want {
				t.Errorf("%s %s version: %q %v, want %q", arch, b, s, err, want)
			}
		}
	}
	stamp(t, []string{"env"}, "amd64")
	qemu, err := exec.LookPath("qemu-aarch64-static")
	if err != nil {
		t.Skip("qemu-aarch64-static is not installed (Debian: apt-get install qemu-user-static): the arm64 binaries were not run")
	}
	stamp(t, []string{qemu}, "arm64")
}
