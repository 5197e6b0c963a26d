package install

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/mesh-cni/mesh-cni/internal/config"
)

const testPluginJSON = `{
  "type": "mesh-cni",
  "capabilities": {"io.kubernetes.cri.pod-annotations": true},
  "logLevel": "info",
  "backend": "auto",
  "excludeNamespaces": ["kube-system", "mesh-cni"],
  "kubeconfig": "/etc/mesh-cni/wrong",
  "meshes": {"linkerd": {"proxyUID": 2102, "inboundPort": 4143, "outboundPort": 4140}}
}`

var testHostPaths = config.HostPaths{
	Kubeconfig:   "/var/lib/mesh-cni/kubeconfig",
	AgentSocket:  "/var/run/mesh-cni/agent.sock",
	ReportSocket: "/var/run/mesh-cni/report.sock",
	ReadyMarker:  "/var/run/mesh-cni/ready",
}

type env struct {
	root, bin, conf, state, plugin, helper string
	in                                     *Installer
}

func newEnv(t testing.TB, mod func(*Config)) *env {
	t.Helper()
	root := t.TempDir()
	e := &env{
		root:   root,
		bin:    filepath.Join(root, "opt/cni/bin"),
		conf:   filepath.Join(root, "etc/cni/net.d"),
		state:  filepath.Join(root, "var/lib/mesh-cni"),
		plugin: filepath.Join(root, "image/mesh-cni"),
		helper: filepath.Join(root, "image/mesh-cni-podget"),
	}
	for _, d := range []string{e.bin, e.conf, filepath.Dir(e.plugin)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(e.plugin, []byte("#!/bin/sh\necho plugin\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.helper, []byte("#!/bin/sh\necho podget\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	entry, err := config.Load([]byte(testPluginJSON), testHostPaths)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		BinDir: e.bin, ConfDir: e.conf, StateDir: e.state, PluginBinary: e.plugin, HelperBinary: e.helper,
		Chained: true, Entry: entry,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if mod != nil {
		mod(&cfg)
	}
	e.in, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata/conflists", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// put writes a file into the conf dir with an mtime in the past, as a
// file written long before the agent started.
func (e *env) put(t testing.TB, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(e.conf, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	return p
}

func (e *env) read(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.conf, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// snapshot returns every file under dir with its content.
func snapshot(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			rel, _ := filepath.Rel(dir, p)
			out[rel] = b
		}
		return nil
	})
	return out
}

func sameFiles(t testing.TB, want, got map[string][]byte) {
	t.Helper()
	for k, v := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("file %s is gone", k)
		} else if !bytes.Equal(g, v) {
			t.Errorf("file %s changed:\n--- want\n%s\n--- got\n%s", k, v, g)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected file %s", k)
		}
	}
}

// loadChained loads path with libcni, as the runtime would, and checks
// that our entry is in the chain exactly once, last.
func loadChained(t testing.TB, path string) *libcni.NetworkConfigList {
	t.Helper()
	l, err := libcni.ConfListFromFile(path)
	if err != nil {
		t.Fatalf("runtime cannot load %s: %v", path, err)
	}
	n := 0
	for _, p := range l.Plugins {
		if p.Network.Type == "mesh-cni" {
			n++
		}
	}
	if n != 1 || l.Plugins[len(l.Plugins)-1].Network.Type != "mesh-cni" {
		t.Fatalf("%s: want mesh-cni once and last, got %d entries: %s", path, n, l.Bytes)
	}
	return l
}

// refusal is a change to a valid Config that New must refuse, with what
// its error says.
type refusal struct {
	mod  func(*Config)
	want string
}

// checkRefused fails unless New refuses each change with its error.
func checkRefused(t *testing.T, cases []refusal) {
	t.Helper()
	for _, c := range cases {
		cfg := Config{BinDir: "/b", ConfDir: "/c", StateDir: "/s", Entry: []byte("{}"), Chained: true}
		c.mod(&cfg)
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want %q", cfg, err, c.want)
		}
	}
}
