package hack

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/doctest"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// releaseDocs runs the `<!-- doctest: release -->` blocks of docs/release.md
// and docs/install.md against the release: the placeholders become its
// registry, version and digests, and the commands run with the tools the
// release used. helm install is rendered with helm template from the
// registry, and each render (Helm's or Kustomize's) must run the image
// by the release's digest.
func releaseDocs(t *testing.T, env map[string]string, tools, helm string, run func(string, ...string) (string, error)) {
	reg := env["REGISTRY"]
	repl := strings.NewReplacer(
		"REGISTRY/", reg+"/", "MIRROR/", reg+"/mirror/",
		"CHART_DIGEST", env["CHART_DIGEST"], "AMD64_DIGEST", env["IMAGE_DIGEST_AMD64"],
		"DIGEST", env["IMAGE_DIGEST"], "CHART_VERSION", env["CHART_VERSION"], "VERSION", env["VERSION"],
		"cosign.pub", env["COSIGN_PUB"])
	bins := map[string]string{"crane": filepath.Join(tools, "crane"), "cosign": filepath.Join(tools, "cosign"), "helm": helm}
	dir := t.TempDir()
	kust, err := filepath.Abs("../kustomize")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(kust, filepath.Join(dir, "kustomize")); err != nil {
		t.Fatal(err)
	}
	// pinned checks that a render runs repo's image by the digest only.
	pinned := func(where, out, repo string) {
		t.Helper()
		if want := "image: " + repo + "@" + env["IMAGE_DIGEST"] + "\n"; !strings.Contains(out, want) {
			t.Errorf("%s: the render does not run %q", where, strings.TrimSpace(want))
		}
		if strings.Contains(out, "image: mesh-cni:") {
			t.Errorf("%s: the render still runs an image by tag", where)
		}
	}
	ran := map[string]int{}
	for _, doc := range []string{"release.md", "install.md"} {
		blocks, err := doctest.Parse(filepath.Join("..", "docs", doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blocks {
			if !b.Release() {
				continue
			}
			for _, c := range b.Commands {
				where := doc + ":" + strconv.Itoa(c.Line)
				ran[doc]++
				if c.Stdin != "" {
					p := filepath.Join(dir, c.Redirect)
					if err := os.WriteFile(p, []byte(repl.Replace(c.Stdin)), 0o644); err != nil {
						t.Fatalf("%s: %v", where, err)
					}
					continue
				}
				argv := c.Pipeline[0]
				args := make([]string, 0, len(argv))
				for _, a := range argv[1:] {
					args = append(args, repl.Replace(a))
				}
				switch {
				case len(c.Pipeline) != 1:
					t.Errorf("%s: %q: no pipelines in release blocks", where, c.Text)
				case argv[0] == "mkdir" && len(args) == 2 && args[0] == "-p":
					if err := os.MkdirAll(filepath.Join(dir, args[1]), 0o755); err != nil {
						t.Fatal(err)
					}
				case argv[0] == "kustomize" && len(args) == 2 && args[0] == "build":
					// `kubectl kustomize`, the same engine: hack is in the product module,
					// whose go.mod requires no Kustomize for its tests.
					kubectl, err := testenv.Binary("kubectl")
					if err != nil {
						t.Fatal(err)
					}
					out, err := run(kubectl, "kustomize", filepath.Join(dir, args[1]))
					if err != nil {
						t.Errorf("%s: kubectl kustomize: %v\n%s", where, err, out)
						continue
					}
					pinned(where, out, reg+"/mesh-cni")
				case argv[0] == "helm" && len(args) > 0 && args[0] == "install":
					// No cluster here: render what the install would apply,
					// from the registry (loopback HTTP).
					args = append(append([]string{"template"}, args[1:]...), "--plain-http")
					out, err := run(helm, args...)
					if err != nil {
						t.Errorf("%s: helm %s: %v\n%s", where, strings.Join(args, " "), err, out)
						continue
					}
					repo := reg + "/mesh-cni"
					for i, a := range args {
						if v, ok := strings.CutPrefix(a, "image.repository="); ok && args[i-1] == "--set" {
							repo = v
						}
					}
					pinned(where, out, repo)
				case bins[argv[0]] != "":
					if argv[0] == "helm" {
						args = append(args, "--plain-http", "-d", dir) // the test's registry is loopback HTTP
					}
					if s, err := run(bins[argv[0]], args...); err != nil {
						t.Errorf("%s: %s %s: %v\n%s", where, argv[0], strings.Join(args, " "), err, s)
					}
				default:
					t.Errorf("%s: %q: only crane, cosign, helm, and kustomize build of a kustomization written there, are run", where, c.Text)
				}
			}
		}
	}
	t.Logf("commands run: %v", ran)
	for _, doc := range []string{"release.md", "install.md"} {
		if ran[doc] == 0 {
			t.Errorf("docs/%s has no `doctest: release` commands", doc)
		}
	}
}
