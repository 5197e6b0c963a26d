package hack

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
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
	tools, helm := releaseTools(t)
	reg := startRegistry(t, tools)
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Scale(8*time.Minute))
	defer cancel()
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
	image := reg + "/mesh-cni@" + env["IMAGE_DIGEST"]
	chart := reg + "/charts/mesh-cni@" + env["CHART_DIGEST"]

	run := func(name string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Env = append(os.Environ(), "COSIGN_PASSWORD=")
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	must := func(name string, args ...string) string {
		t.Helper()
		s, err := run(name, args...)
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, s)
		}
		return s
	}
	crane := filepath.Join(tools, "crane")
	cosign := filepath.Join(tools, "cosign")

	t.Run("index lists both platforms", func(t *testing.T) {
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
		if err := json.Unmarshal([]byte(must(crane, "manifest", reg+"/mesh-cni:"+version)), &idx); err != nil {
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
			if err := json.Unmarshal([]byte(must(crane, "config", reg+"/mesh-cni@"+d)), &cfg); err != nil {
				t.Fatal(err)
			}
			if cfg.Architecture != strings.TrimPrefix(p, "linux/") || strings.Join(cfg.Config.Entrypoint, " ") != "/mesh-cni-agent" || cfg.Config.User != "0:0" {
				t.Errorf("%s config: %+v", p, cfg)
			}
			files := must("bash", "-c", fmt.Sprintf("%q export %q - | tar -t", crane, reg+"/mesh-cni@"+d))
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
			if err := json.Unmarshal([]byte(must(crane, "manifest", reg+"/mesh-cni@"+d)), &man); err != nil {
				t.Fatal(err)
			}
			var size int64
			for _, l := range man.Layers {
				size += l.Size
			}
			t.Logf("%s image: %.1f MB compressed", p, float64(size)/1e6)
		}
	})

	pub := env["COSIGN_PUB"]
	verify := func(ref string, extra ...string) (string, error) {
		return run(cosign, append([]string{"verify", "--key", pub, "--insecure-ignore-tlog=true"}, append(extra, ref)...)...)
	}
	t.Run("signatures verify", func(t *testing.T) {
		for _, ref := range []string{image, chart} {
			if s, err := verify(ref); err != nil {
				t.Errorf("cosign verify %s: %v\n%s", ref, err, s)
			}
		}
		for _, arch := range []string{"AMD64", "ARM64"} {
			ref := reg + "/mesh-cni@" + env["IMAGE_DIGEST_"+arch]
			s, err := run(cosign, "verify-attestation", "--key", pub, "--insecure-ignore-tlog=true", "--type", "spdxjson", ref)
			if err != nil {
				t.Errorf("cosign verify-attestation (SBOM) %s: %v\n%s", ref, err, s)
			}
		}
	})

	t.Run("unsigned or tampered is refused", func(t *testing.T) {
		// An image changed after signing (a label added) has another digest
		// and no signature.
		tampered := reg + "/mesh-cni:tampered"
		must(crane, "mutate", "-l", "tampered=yes", reg+"/mesh-cni:"+version+"-linux-amd64", "-t", tampered)
		if s, err := verify(tampered); err == nil {
			t.Errorf("cosign verify passed for a tampered image:\n%s", s)
		}
		// The signed index checked with another key.
		other := t.TempDir()
		cmd := exec.CommandContext(ctx, cosign, "generate-key-pair")
		cmd.Dir, cmd.Env = other, append(os.Environ(), "COSIGN_PASSWORD=")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("generate-key-pair: %v\n%s", err, b)
		}
		if s, err := run(cosign, "verify", "--key", filepath.Join(other, "cosign.pub"), "--insecure-ignore-tlog=true", image); err == nil {
			t.Errorf("cosign verify passed with a key that did not sign:\n%s", s)
		}
		// A chart pushed by hand, not signed.
		must(crane, "copy", chart, reg+"/charts/unsigned:"+env["CHART_VERSION"])
		if s, err := verify(reg + "/charts/unsigned:" + env["CHART_VERSION"]); err == nil {
			t.Errorf("cosign verify passed for an unsigned chart:\n%s", s)
		}
	})

	t.Run("chart from oci pins the digest", func(t *testing.T) {
		dir := t.TempDir()
		must(helm, "pull", env["CHART"], "--version", env["CHART_VERSION"], "--plain-http", "--untar", "-d", dir)
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
		manifests := must(helm, "template", "mesh-cni", filepath.Join(dir, "mesh-cni"), "-n", "mesh-cni")
		if n := strings.Count(manifests, "image: "+image+"\n"); n == 0 {
			t.Errorf("rendered chart does not run %s", image)
		}
		if strings.Contains(manifests, "image: mesh-cni:") {
			t.Error("rendered chart still runs an image by tag")
		}
	})

	t.Run("docs commands against the release", func(t *testing.T) { releaseDocs(t, env, tools, helm, run) })

	t.Run("SBOM per platform", func(t *testing.T) {
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
	})

	t.Run("krew manifest with the CLI for both platforms", func(t *testing.T) {
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
	})

	t.Run("binaries stamped for both platforms", func(t *testing.T) {
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
				s, err := run(prefix[0], args...)
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
	})
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
