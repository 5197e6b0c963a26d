// The docs' own test: every command in a ```sh block of docs/*.md is run or
// checked, so the docs cannot rot. helm template/lint run the real helm
// against the chart (install/upgrade lines are rendered with helm template),
// kustomize lines are built with the kustomize API, mesh-cnictl runs as a
// built binary (check against a real API server), and
// cluster-only kubectl lines are parsed and the objects, files and flags
// they name are checked against what the chart and the overlays render.
package docs_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/mesh-cni/mesh-cni/internal/agent/repair"
	"github.com/mesh-cni/mesh-cni/internal/ctl/check"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/doctest"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// docs lists the Markdown files to check.
func docs(t *testing.T) []string {
	files, err := filepath.Glob("*.md")
	if err != nil || len(files) == 0 {
		t.Fatalf("no docs found: %v", err)
	}
	sort.Strings(files)
	return files
}

func TestCommands(t *testing.T) {
	r := newRunner(t)
	for _, f := range docs(t) {
		blocks, err := doctest.Parse(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blocks {
			switch {
			case b.Lang == "sh":
				r.block(t, b)
			case b.Lang == "yaml" && strings.Contains(b.Body, "kind: Pod"):
				r.podExample(t, b)
			}
		}
	}
	r.deferred(t)
	if r.ran == 0 {
		t.Fatal("no command was run")
	}
	t.Logf("%d commands run or checked", r.ran)
}

// Names the docs mention must exist: metrics, the node annotation, links.
func TestNames(t *testing.T) {
	src, err := os.ReadFile("../internal/agent/metrics/metrics.go")
	if err != nil {
		t.Fatal(err)
	}
	metrics := map[string]bool{}
	for _, m := range regexp.MustCompile(`Name:\s+"(mesh_cni_[a-z_]+)"`).FindAllStringSubmatch(string(src), -1) {
		metrics[m[1]] = true
	}
	if len(metrics) == 0 {
		t.Fatal("no metric names found in internal/agent/metrics")
	}
	metricRef := regexp.MustCompile("`(mesh_cni_[a-z_]+)")
	annRef := regexp.MustCompile(`mesh-cni\.io/[a-z-]+`)
	link := regexp.MustCompile(`\]\(([^)#:]+\.md)(#[a-z0-9-]+)?\)`)
	for _, f := range docs(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, m := range metricRef.FindAllStringSubmatch(text, -1) {
			if !metrics[m[1]] {
				t.Errorf("%s: metric %s is not in internal/agent/metrics", f, m[1])
			}
		}
		for _, a := range annRef.FindAllString(text, -1) {
			if a != check.StatusAnnotation && a != "mesh-cni.io/not-ready" && a != repairLabelKey {
				t.Errorf("%s: annotation or taint %s is not one mesh-cni uses", f, a)
			}
		}
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := filepath.Join(filepath.Dir(f), m[1])
			body, err := os.ReadFile(target)
			if err != nil {
				t.Errorf("%s: link to %s: %v", f, m[1], err)
				continue
			}
			if m[2] != "" && !hasAnchor(string(body), m[2][1:]) {
				t.Errorf("%s: link to %s%s: no such heading", f, m[1], m[2])
			}
		}
	}
}

// hasAnchor reports a heading whose GitHub anchor is a.
func hasAnchor(md, a string) bool {
	for _, line := range strings.Split(md, "\n") {
		h, ok := strings.CutPrefix(line, "#")
		if !ok {
			continue
		}
		h = strings.ToLower(strings.TrimSpace(strings.TrimLeft(h, "#")))
		var b strings.Builder
		for _, r := range h {
			switch {
			case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		if b.String() == a {
			return true
		}
	}
	return false
}

// goBuild builds a main package of the repo into dir with the release
// version, as make build does.
func goBuild(t *testing.T, root, dir, name, pkg string) string {
	t.Helper()
	v, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags",
		"-X github.com/mesh-cni/mesh-cni/internal/version.Version="+strings.TrimSpace(string(v)), "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// helmBinary is the Helm 3 that hack/chart-tools.sh builds into the cache
// (only when missing); the script prints the dir holding it.
func helmBinary(t *testing.T, root string) string {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(root, "hack", "chart-tools.sh"), "helm")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("hack/chart-tools.sh helm: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	return filepath.Join(lines[len(lines)-1], "helm")
}

// The per-platform table in install.md: every host path a row names must be
// in what that row's Helm preset and Kustomize overlay render.
func TestPlatformTable(t *testing.T) {
	root := testenv.RepoRoot(t)
	helm := helmBinary(t, root)
	body, err := os.ReadFile("install.md")
	if err != nil {
		t.Fatal(err)
	}
	preset := regexp.MustCompile("`--set platform=([a-z0-9]+)`")
	overlay := regexp.MustCompile("`(kustomize/[a-z0-9/]+)`")
	path := regexp.MustCompile("`(/[a-z0-9/._-]+)`")
	rows := 0
	for _, line := range strings.Split(string(body), "\n") {
		p, o := preset.FindStringSubmatch(line), overlay.FindStringSubmatch(line)
		if !strings.HasPrefix(line, "|") || o == nil {
			continue
		}
		rows++
		var renders []string
		if p != nil {
			cmd := exec.Command(helm, "template", "mesh-cni", filepath.Join(root, "charts/mesh-cni"), "-n", "mesh-cni",
				"--kube-version", strings.TrimPrefix(testenv.KubernetesVersion, "v"), "--set", "platform="+p[1])
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Errorf("platform %s: %v\n%s", p[1], err, out)
				continue
			}
			renders = append(renders, string(out))
		}
		m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(root, o[1]))
		if err != nil {
			t.Errorf("%s: %v", o[1], err)
			continue
		}
		y, _ := m.AsYaml()
		renders = append(renders, string(y))
		for _, want := range path.FindAllStringSubmatch(line, -1) {
			for i, r := range renders {
				if !strings.Contains(r, "path: "+want[1]) && !strings.Contains(r, want[1]+"\"") && !strings.Contains(r, "="+want[1]) {
					t.Errorf("install.md row %q: %s is not in render %d (%s)", strings.SplitN(line, "|", 3)[1], want[1], i, o[1])
				}
			}
		}
	}
	if rows < 8 {
		t.Errorf("found %d platform rows in install.md, want 8", rows)
	}
}

// The linkerd2-cni values file in linkerd.md lands where the mapping table
// says it does.
func TestLinkerdValuesMapping(t *testing.T) {
	root := testenv.RepoRoot(t)
	blocks, err := doctest.Parse("linkerd.md")
	if err != nil {
		t.Fatal(err)
	}
	var values string
	for _, b := range blocks {
		for _, c := range b.Commands {
			if c.Redirect == "values.yaml" && c.Stdin != "" {
				values = c.Stdin
			}
		}
	}
	if values == "" {
		t.Fatal("linkerd.md has no values.yaml here-document")
	}
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(helmBinary(t, root), "template", "linkerd-cni", filepath.Join(root, "charts/mesh-cni"),
		"-n", "linkerd-cni", "--kube-version", strings.TrimPrefix(testenv.KubernetesVersion, "v"), "-f", f).CombinedOutput()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	var entry struct {
		LogLevel string `json:"logLevel"`
		Backend  string `json:"backend"`
		IPv6     *bool  `json:"ipv6"`
		Meshes   map[string]struct {
			InboundPort    int      `json:"inboundPort"`
			OutboundPort   int      `json:"outboundPort"`
			ProxyUID       *int64   `json:"proxyUID"`
			ProxyGID       *int64   `json:"proxyGID"`
			IgnoreInbound  []string `json:"ignoreInboundPorts"`
			IgnoreOutbound []string `json:"ignoreOutboundPorts"`
			InboundPorts   []string `json:"portsToRedirect"`
		} `json:"meshes"`
	}
	var daemonSet, repairRole bool
	for _, doc := range strings.Split(string(out), "\n---") {
		var o struct {
			Kind     string
			Metadata struct{ Name string }
			Data     map[string]string
			Spec     struct {
				Template struct {
					Spec struct {
						PriorityClassName string `json:"priorityClassName"`
						Volumes           []struct {
							Name     string
							HostPath *struct{ Path string } `json:"hostPath"`
						}
					}
				}
			}
		}
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatal(err)
		}
		switch o.Kind {
		case "ConfigMap":
			if err := json.Unmarshal([]byte(o.Data["plugin.json"]), &entry); err != nil {
				t.Fatalf("plugin.json: %v", err)
			}
		case "DaemonSet":
			daemonSet = true
			if o.Spec.Template.Spec.PriorityClassName != "system-node-critical" {
				t.Errorf("priorityClassName %q", o.Spec.Template.Spec.PriorityClassName)
			}
			paths := map[string]bool{}
			for _, v := range o.Spec.Template.Spec.Volumes {
				if v.HostPath != nil {
					paths[v.HostPath.Path] = true
				}
			}
			if !paths["/etc/cni/net.d"] || !paths["/opt/cni/bin"] {
				t.Errorf("destCNINetDir/destCNIBinDir not among the host paths %v", paths)
			}
		case "ClusterRole":
			repairRole = repairRole || strings.HasSuffix(o.Metadata.Name, "-repair")
		}
	}
	l := entry.Meshes["linkerd"]
	checks := []struct {
		what      string
		got, want any
	}{
		{"inboundProxyPort", l.InboundPort, 4143},
		{"outboundProxyPort", l.OutboundPort, 4140},
		{"proxyUID", deref(l.ProxyUID), int64(2102)},
		{"proxyGID", deref(l.ProxyGID), int64(2102)},
		{"ignoreInboundPorts", strings.Join(l.IgnoreInbound, ","), "4190,4191,25,587"},
		{"ignoreOutboundPorts", strings.Join(l.IgnoreOutbound, ","), "443"},
		{"portsToRedirect", len(l.InboundPorts), 0},
		{"logLevel", entry.LogLevel, "info"},
		{"iptablesMode", entry.Backend, "iptables-nft"},
		{"disableIPv6", entry.IPv6 != nil && !*entry.IPv6, true},
		{"repairController.enabled", repairRole, true},
		{"DaemonSet rendered", daemonSet, true},
	}
	for _, c := range checks {
		if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
			t.Errorf("%s: rendered %v, linkerd.md says %v", c.what, c.got, c.want)
		}
	}
}

func deref(p *int64) any {
	if p == nil {
		return "none"
	}
	return *p
}

// repairLabelKey is the key of the label the agent's label repair sets.
var repairLabelKey, _, _ = strings.Cut(repair.DefaultLabel, "=")
