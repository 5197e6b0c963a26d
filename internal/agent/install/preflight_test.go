package install

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/config"
)

// An entry the plugin's parser rejects fails every pod on the node; the
// agent must refuse it, naming the key.
func TestBuildEntryRejectsWhatThePluginRejects(t *testing.T) {
	for raw, key := range map[string]string{
		`{"type":"mesh-cni","backend":"nft","meshes":{"istio":{"proxyUID":-5}}}`: "backend",
		`{"type":"mesh-cni","meshes":{"istio":{"proxyUID":-5}}}`:                 "proxyUID",
		`{"type":"mesh-cni","logLevel":"loud"}`:                                  "logLevel",
		`{"type":"mesh-cni","lookupTimeout":"forever"}`:                          "lookupTimeout",
		`{"type":"mesh-cni","excludeNamespaces":["Kube_System"]}`:                "excludeNamespaces",
		`{"type":"mesh-cni","meshes":{"cilium":{}}}`:                             "cilium",
	} {
		_, err := config.Load([]byte(raw), testHostPaths)
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: want an error naming %s, got %v", raw, key, err)
		}
	}
}

// A refused entry leaves the chain as the last good pass wrote it.
func TestRefusedEntryKeepsLastGood(t *testing.T) {
	raw := testPluginJSON
	e := newEnv(t, func(c *Config) {
		c.LoadEntry = func() ([]byte, error) { return config.Load([]byte(raw), testHostPaths) }
	})
	e.put(t, "10-kindnet.conflist", fixture(t, "kindnet-ipv4.conflist"))
	if st := e.in.pass(); st.Err != nil || !st.Wrote {
		t.Fatalf("first pass: %+v", st)
	}
	good := snapshot(t, e.conf)
	raw = `{"type":"mesh-cni","backend":"nftables","meshes":{"istio":{"proxyUID":-5}}}`
	st := e.in.pass()
	if !errors.Is(st.Err, ErrRefused) || !strings.Contains(st.Err.Error(), "proxyUID") || st.Stage != "entry" {
		t.Fatalf("want a refusal naming proxyUID, got %+v", st)
	}
	sameFiles(t, good, snapshot(t, e.conf))
	loadChained(t, filepath.Join(e.conf, "10-kindnet.conflist"))
}

func TestWrongBinDirRefused(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Preflight = &Preflight{PrimaryBinaries: true} })
	e.put(t, "10-kindnet.conflist", fixture(t, "kindnet-ipv4.conflist"))
	before := snapshot(t, e.conf)
	_, err := e.in.Reconcile()
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "lacks ptp, host-local, portmap") || !strings.Contains(err.Error(), e.bin) {
		t.Fatalf("want the missing binaries named, got %v", err)
	}
	sameFiles(t, before, snapshot(t, e.conf))
	for _, b := range []string{"ptp", "host-local", "portmap"} {
		if err := os.WriteFile(filepath.Join(e.bin, b), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.in.Reconcile(); err != nil {
		t.Fatalf("with the binaries in place: %v", err)
	}
	loadChained(t, filepath.Join(e.conf, "10-kindnet.conflist"))
}

func TestBackendToolsMissingRefused(t *testing.T) {
	tools := t.TempDir()
	entry, err := config.Load([]byte(`{"type":"mesh-cni","backend":"iptables-legacy"}`), testHostPaths)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *Config) {
		c.Entry = entry
		c.Preflight = &Preflight{ToolDirs: []string{tools}}
	})
	e.put(t, "10-kindnet.conflist", fixture(t, "kindnet-ipv4.conflist"))
	before := snapshot(t, e.conf)
	st := e.in.pass()
	if !errors.Is(st.Err, ErrRefused) || !strings.Contains(st.Err.Error(), "iptables-legacy-restore, iptables-legacy-save, ip6tables-legacy-restore, ip6tables-legacy-save") {
		t.Fatalf("want the missing tools named, got %+v", st)
	}
	sameFiles(t, before, snapshot(t, e.conf))
	for _, b := range BackendTools("iptables-legacy") {
		if err := os.WriteFile(filepath.Join(tools, b), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if st := e.in.pass(); st.Err != nil {
		t.Fatalf("with the tools in place: %v", st.Err)
	}
	for _, b := range []string{"auto", "nftables"} {
		if len(BackendTools(b)) != 0 {
			t.Errorf("%s needs no host binaries", b)
		}
	}
}
