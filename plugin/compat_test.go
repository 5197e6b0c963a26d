package main

// The resolved chain entry is an interface between releases: during an
// upgrade the new plugin binary reads the entry the old agent wrote until
// the new agent rewrites it, and during a rollback the reverse. This test
// builds the previous release (hack/previous-release.sh) from its commit
// and runs each plugin against the other release's entry in a real netns.
// The rule it holds is in docs/upgrade.md ("Compatibility").

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-cni/mesh-cni/internal/config"
)

// prevEntryMain is built in the previous release's tree: its agent's own
// resolution of a configured entry, as it chains it. It is written against
// that release's config package (Load has existed since v0.1.0).
const prevEntryMain = `package main

import (
	"fmt"
	"io"
	"os"

	"github.com/mesh-cni/mesh-cni/internal/config"
)

func main() {
	raw, err := io.ReadAll(os.Stdin)
	if err == nil {
		var b []byte
		if b, err = config.Load(raw, config.HostPaths{}); err == nil {
			_, err = os.Stdout.Write(b)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
`

// compatEntry is the configured entry both agents resolve: the plugin's
// host paths as baseConf gives them, Istio judged from annotations.
const compatEntry = `{"type":"mesh-cni","excludeNamespaces":["kube-system"],"lookupTimeout":"200ms",
"kubeconfig":"/nonexistent/kubeconfig","agentSocket":"/nonexistent/agent.sock",
"reportSocket":"/nonexistent/report.sock","readyMarker":"/nonexistent/ready",
"meshes":{"istio":{"trustAnnotations":true}}}`

// previousRelease builds the previous release's plugin and entry resolver
// once per commit, into the persistent cache.
func previousRelease(t *testing.T) (commit, plugin, resolver string) {
	t.Helper()
	out, err := exec.Command("bash", "../hack/previous-release.sh").Output()
	if err != nil {
		t.Fatalf("hack/previous-release.sh: %v", err)
	}
	commit = strings.TrimSpace(string(out))
	if err := exec.Command("git", "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
		t.Skipf("the previous release's commit %s is not in this clone (shallow?): fetch the full history to run the cross-version test", commit)
	}
	cache := os.Getenv("MESH_CNI_CACHE")
	if cache == "" {
		cache = "/var/cache/mesh-cni"
	}
	dir := filepath.Join(cache, "prev-"+commit)
	plugin, resolver = filepath.Join(dir, "mesh-cni"), filepath.Join(dir, "prev-entry")
	if _, err := os.Stat(resolver); err == nil {
		return commit, plugin, resolver
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(cache, "prev-build-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	src := filepath.Join(tmp, "src")
	start := time.Now()
	// From the top of the work tree: in a subdirectory git archive takes
	// only that subdirectory.
	sh := fmt.Sprintf("mkdir -p %[2]s && git -C \"$(git rev-parse --show-toplevel)\" archive %[1]s | tar -x -C %[2]s", commit, src)
	if b, err := exec.Command("bash", "-c", sh).CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", commit, err, b)
	}
	if err := os.MkdirAll(filepath.Join(src, "hack", "prev-entry"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "hack", "prev-entry", "main.go"), []byte(prevEntrySource(src)), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(tmp, "bin")
	for name, pkg := range map[string]string{"mesh-cni": "./plugin", "prev-entry": "./hack/prev-entry"} {
		build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(bin, name), pkg)
		build.Dir = src
		build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
		if b, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build %s of %s: %v\n%s", pkg, commit, err, b)
		}
	}
	if err := os.Rename(bin, dir); err != nil {
		if _, serr := os.Stat(resolver); serr != nil { // not a concurrent build's
			t.Fatal(err)
		}
	}
	t.Logf("built the previous release %s in %s", commit[:12], time.Since(start).Round(time.Second))
	return commit, plugin, resolver
}

// entryConf decodes an entry and makes it the runtime's stdin for a meshed
// pod in netns.
func entryConf(t *testing.T, entry []byte, netns string) map[string]any {
	t.Helper()
	var c map[string]any
	if err := json.Unmarshal(entry, &c); err != nil {
		t.Fatalf("entry %s: %v", entry, err)
	}
	base := baseConf("1.0.0", netns, istioAnnotations(nil))
	for _, k := range []string{"cniVersion", "name", "prevResult", "runtimeConfig"} {
		c[k] = base[k]
	}
	return c
}

func TestEntryAcrossReleases(t *testing.T) {
	commit, prevPlugin, resolver := previousRelease(t)
	t.Logf("previous release: %s", commit)
	cur, err := config.Load([]byte(compatEntry), config.HostPaths{})
	if err != nil {
		t.Fatal(err)
	}
	gen := exec.Command(resolver)
	gen.Stdin = strings.NewReader(compatEntry)
	prev, err := gen.Output()
	if err != nil {
		t.Fatalf("the previous release's agent resolving the entry: %v", err)
	}
	curPlugin := filepath.Join(pluginDir, "mesh-cni")

	// The rule itself: every key the previous agent writes is still
	// written, with a value of the same JSON type.
	t.Run("no key removed, renamed or retyped", func(t *testing.T) {
		was, now := jsonKinds(t, prev), jsonKinds(t, cur)
		for k, kind := range was {
			if now[k] == "" {
				t.Errorf("%s: the previous agent writes it, the current one does not", k)
			} else if now[k] != kind {
				t.Errorf("%s: %s in the previous entry, %s now", k, kind, now[k])
			}
		}
	})

	// run does ADD, CHECK, DEL of a meshed pod and returns the rules ADD
	// wrote.
	run := func(t *testing.T, bin string, entry []byte) string {
		t.Helper()
		p := newPod(t, "shop", "web-1", nil)
		netns := p.netns.Path()
		conf := entryConf(t, entry, netns)
		t.Cleanup(func() { runArgv(t, []string{bin}, "DEL", netns, conf) })
		if o := runArgv(t, []string{bin}, "ADD", netns, conf); !o.ok {
			t.Fatalf("ADD: %v", o)
		}
		dump := ruleDump(t, netns)
		with := ours(dump)
		if len(with) == 0 {
			t.Fatal("ADD wrote no rules")
		}
		var rules strings.Builder
		for _, tool := range with {
			rules.WriteString(tool + ":\n" + dump[tool])
		}
		if o := runArgv(t, []string{bin}, "CHECK", netns, conf); !o.ok {
			t.Errorf("CHECK: %v", o)
		}
		if o := runArgv(t, []string{bin}, "DEL", netns, conf); !o.ok {
			t.Errorf("DEL: %v", o)
		}
		if got := ours(ruleDump(t, netns)); len(got) != 0 {
			t.Errorf("DEL left rules via %v", got)
		}
		return rules.String()
	}
	// Each plugin with its own release's entry is the reference for what
	// the other release's entry must make it write.
	want := map[string]string{}
	for _, c := range []struct{ name, bin string }{{"current", curPlugin}, {"previous", prevPlugin}} {
		own := cur
		if c.name == "previous" {
			own = prev
		}
		t.Run(c.name+" plugin, own entry", func(t *testing.T) { want[c.name] = run(t, c.bin, own) })
	}
	for _, c := range []struct {
		name, plugin, bin string
		entry             []byte
	}{
		{"current plugin, previous agent's entry", "current", curPlugin, prev},
		{"previous plugin, current agent's entry", "previous", prevPlugin, cur},
	} {
		t.Run(c.name, func(t *testing.T) {
			if want[c.plugin] == "" {
				t.Skip("the reference run failed")
			}
			if got := run(t, c.bin, c.entry); got != want[c.plugin] {
				t.Errorf("rules differ from the plugin's with its own entry:\ngot:\n%s\nwant:\n%s", got, want[c.plugin])
			}
		})
	}
	// A later release's entry: keys and a profile this plugin does not
	// know are ignored.
	t.Run("current plugin, a later agent's entry", func(t *testing.T) {
		var m map[string]any
		if err := json.Unmarshal(cur, &m); err != nil {
			t.Fatal(err)
		}
		m["laterKey"] = map[string]any{"x": 1}
		meshes := m["meshes"].(map[string]any)
		meshes["istio"].(map[string]any)["laterProfileKey"] = true
		meshes["laterMesh"] = map[string]any{"enabled": true}
		later, _ := json.Marshal(m)
		if got := run(t, curPlugin, later); want["current"] != "" && got != want["current"] {
			t.Errorf("rules differ from the current entry's:\ngot:\n%s\nwant:\n%s", got, want["current"])
		}
	})
}

// jsonKinds maps each key path of a JSON object ("meshes.istio.proxyUID")
// to the kind of its value.
func jsonKinds(t *testing.T, b []byte) map[string]string {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		kind := fmt.Sprintf("%T", v)
		if m, ok := v.(map[string]any); ok {
			kind = "object"
			for k, e := range m {
				walk(strings.TrimPrefix(path+"."+k, "."), e)
			}
		}
		if path != "" {
			out[path] = kind
		}
	}
	walk("", v)
	return out
}

// prevEntrySource is prevEntryMain for the tree in src: a release before the
// internal/ layout has the config package at pkg/config.
func prevEntrySource(src string) string {
	if _, err := os.Stat(filepath.Join(src, "internal", "config")); err != nil {
		return strings.ReplaceAll(prevEntryMain, "mesh-cni/internal/config", "mesh-cni/pkg/config")
	}
	return prevEntryMain
}
