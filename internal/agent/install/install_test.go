package install

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/mesh-cni/mesh-cni/internal/config"
	"github.com/mesh-cni/mesh-cni/internal/mesh"
)

// nodeName maps a fixture to a file name with the extension it has on a node.
func nodeName(fixture string) string { return "10-" + fixture }

func fixtureNames(t *testing.T) []string {
	ents, err := os.ReadDir("testdata/conflists")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if ext := filepath.Ext(e.Name()); ext == ".conf" || ext == ".conflist" {
			out = append(out, e.Name())
		}
	}
	if len(out) < 30 {
		t.Fatalf("only %d fixtures", len(out))
	}
	return out
}

// refused lists valid-JSON fixtures that must not be chained into.
var refused = map[string]string{
	"broken-primary-lost-istio-only.conflist": "no primary (interface) plugin",
	"kthw-loopback-cni1.1.0.conf":             "no primary (interface) plugin",
}

func TestFixtures(t *testing.T) {
	for _, name := range fixtureNames(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, nil)
			orig := fixture(t, name)
			file := nodeName(name)
			e.put(t, file, orig)
			before := snapshot(t, e.conf)
			if _, err := e.in.InstallBinary(); err != nil {
				t.Fatal(err)
			}
			res, err := e.in.Reconcile()
			if strings.HasPrefix(name, "broken-") || refused[name] != "" {
				if err == nil {
					t.Fatalf("chained into %s: %s", name, e.read(t, file))
				}
				if want := refused[name]; want != "" && !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
				if !errors.Is(err, ErrNoPrimary) && refused[name] == "" && !strings.HasPrefix(name, "broken-primary") {
					t.Errorf("error does not say there is no primary: %v", err)
				}
				sameFiles(t, before, snapshot(t, e.conf))
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !res.Wrote {
				t.Fatal("nothing written")
			}
			chained := loadChained(t, res.Conf)
			conv := strings.HasSuffix(file, ".conf")
			if conv {
				if _, err := os.Stat(filepath.Join(e.conf, file)); !os.IsNotExist(err) {
					t.Errorf(".conf still there after conversion: %v", err)
				}
				c, err := libcni.ConfFromBytes(orig) //nolint:staticcheck // primaries still write .conf files; only this reads them
				if err != nil {
					t.Fatal(err)
				}
				if chained.CNIVersion != c.Network.CNIVersion || chained.Name != c.Network.Name {
					t.Errorf("conversion changed version/name: %q/%q, was %q/%q", chained.CNIVersion, chained.Name, c.Network.CNIVersion, c.Network.Name)
				}
				var a, b any
				json.Unmarshal(orig, &a)
				json.Unmarshal(chained.Plugins[0].Bytes, &b)
				ab, _ := json.Marshal(a)
				bb, _ := json.Marshal(b)
				if !bytes.Equal(ab, bb) {
					t.Errorf("plugin changed in conversion:\n%s\n%s", ab, bb)
				}
			} else {
				out := e.read(t, file)
				stripped, n, err := removePlugins(out, "mesh-cni")
				if err != nil || n != 1 || !bytes.Equal(stripped, orig) {
					t.Errorf("chained file is not the original plus our entry (n=%d, err=%v):\n%s", n, err, out)
				}
				old, err := libcni.ConfListFromBytes(orig)
				if err != nil {
					t.Fatal(err)
				}
				if chained.CNIVersion != old.CNIVersion || len(chained.Plugins) != len(old.Plugins)+1 {
					t.Errorf("version or plugins changed")
				}
			}
			// Idempotent: a second pass writes nothing.
			if res2, err := e.in.Reconcile(); err != nil || res2.Wrote {
				t.Fatalf("second pass: wrote=%v err=%v", res2.Wrote, err)
			}
			// The primary rewrites its file: we chain again.
			if !conv {
				e.put(t, file, orig)
				res3, err := e.in.Reconcile()
				if err != nil || !res3.Wrote || !res3.Rechained {
					t.Fatalf("after rewrite: %+v err=%v", res3, err)
				}
				loadChained(t, res3.Conf)
			}
			// Uninstall restores the conf dir byte for byte.
			if err := e.in.Uninstall(); err != nil {
				t.Fatal(err)
			}
			sameFiles(t, before, snapshot(t, e.conf))
			if _, err := os.Stat(filepath.Join(e.state, "install.json")); !os.IsNotExist(err) {
				t.Errorf("install record left behind: %v", err)
			}
		})
	}
}

func TestOnlyPrimaryTouched(t *testing.T) {
	e := newEnv(t, nil)
	e.put(t, "10-calico.conflist", fixture(t, "calico-manifest-portmap-bandwidth.conflist"))
	e.put(t, "05-cilium.conflist.bak", fixture(t, "cilium-default.conflist"))
	e.put(t, "20-flannel.conflist", fixture(t, "flannel-kube-flannel.conflist"))
	e.put(t, "99-loopback.conf", fixture(t, "kthw-loopback-cni1.1.0.conf"))
	e.put(t, ".10-calico.conflist.swp", []byte("garbage"))
	e.put(t, "calico-kubeconfig", []byte("apiVersion: v1\n"))
	os.MkdirAll(filepath.Join(e.conf, "multus.d"), 0o755)
	e.put(t, "multus.d/00-delegate.conflist", fixture(t, "kindnet-ipv4.conflist"))
	before := snapshot(t, e.conf)
	res, err := e.in.Reconcile()
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(res.Conf) != "10-calico.conflist" {
		t.Fatalf("chained %s", res.Conf)
	}
	after := snapshot(t, e.conf)
	delete(before, "10-calico.conflist")
	delete(after, "10-calico.conflist")
	sameFiles(t, before, after)
}

func TestInvalidEarlierFileSkipped(t *testing.T) {
	e := newEnv(t, nil)
	e.put(t, "05-cilium.conflist", fixture(t, "broken-cilium-portmap-trailing-comma.conflist"))
	e.put(t, "10-flannel.conflist", fixture(t, "flannel-kube-flannel.conflist"))
	res, err := e.in.Reconcile()
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(res.Conf) != "10-flannel.conflist" {
		t.Fatalf("chained %s", res.Conf)
	}
	if !bytes.Equal(e.read(t, "05-cilium.conflist"), fixture(t, "broken-cilium-portmap-trailing-comma.conflist")) {
		t.Error("broken file was touched")
	}
}

// A file that just changed and is not valid yet may be mid-write: wait
// instead of chaining into the next file.
func TestSettlingFileWaitedFor(t *testing.T) {
	e := newEnv(t, nil)
	e.put(t, "10-flannel.conflist", fixture(t, "flannel-kube-flannel.conflist"))
	half := fixture(t, "calico-manifest-cni1.0.0.conflist")[:100]
	if err := os.WriteFile(filepath.Join(e.conf, "05-calico.conflist"), half, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := e.in.Reconcile()
	if !errors.Is(err, ErrSettling) {
		t.Fatalf("want ErrSettling, got %v", err)
	}
	if !bytes.Equal(e.read(t, "10-flannel.conflist"), fixture(t, "flannel-kube-flannel.conflist")) {
		t.Error("next file was chained while the first was settling")
	}
}

func TestNoPrimaryNotReady(t *testing.T) {
	e := newEnv(t, nil)
	_, err := e.in.Reconcile()
	if !errors.Is(err, ErrNoPrimary) {
		t.Fatalf("want ErrNoPrimary, got %v", err)
	}
	e.put(t, "10-kindnet.conflist", fixture(t, "kindnet-ipv4.conflist"))
	res, err := e.in.Reconcile()
	if err != nil {
		t.Fatal(err)
	}
	loadChained(t, res.Conf)
}

func TestStaleEntryReplaced(t *testing.T) {
	e := newEnv(t, nil)
	orig := fixture(t, "kindnet-ipv4.conflist")
	stale := []byte(`{"type":"mesh-cni","logLevel":"debug"}`)
	withStale, err := appendPlugin(orig, stale)
	if err != nil {
		t.Fatal(err)
	}
	// Another chained plugin after ours: ours must move, theirs stay.
	withStale, err = appendPlugin(withStale, []byte(`{"type":"bandwidth","capabilities":{"bandwidth":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	e.put(t, "10-kindnet.conflist", withStale)
	res, err := e.in.Reconcile()
	if err != nil {
		t.Fatal(err)
	}
	l := loadChained(t, res.Conf)
	types := []string{}
	for _, p := range l.Plugins {
		types = append(types, p.Network.Type)
	}
	if strings.Join(types, ",") != "ptp,portmap,bandwidth,mesh-cni" {
		t.Fatalf("chain %v", types)
	}
	var got map[string]any
	json.Unmarshal(l.Plugins[3].Bytes, &got)
	if got["logLevel"] != "info" || got["kubeconfig"] != testHostPaths.Kubeconfig {
		t.Errorf("entry not replaced: %s", l.Plugins[3].Bytes)
	}
}

// Our entry anywhere in the chain is fine: moving it last would fight
// another installer that also wants to be last.
func TestEntryNotLastLeftAlone(t *testing.T) {
	e := newEnv(t, nil)
	orig, _ := appendPlugin(fixture(t, "kindnet-ipv4.conflist"), e.in.cfg.Entry)
	orig, _ = appendPlugin(orig, []byte(`{"type":"istio-cni"}`))
	e.put(t, "10-kindnet.conflist", orig)
	res, err := e.in.Reconcile()
	if err != nil || res.Wrote {
		t.Fatalf("wrote=%v err=%v", res.Wrote, err)
	}
}

func TestConfiguredFileName(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ConfFileName = "20-flannel.conf" })
	e.put(t, "10-calico.conflist", fixture(t, "calico-manifest-cni1.0.0.conflist"))
	e.put(t, "20-flannel.conflist", fixture(t, "flannel-kube-flannel.conflist"))
	res, err := e.in.Reconcile()
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(res.Conf) != "20-flannel.conflist" {
		t.Fatalf("chained %s, want the configured name with .conflist fallback", res.Conf)
	}
	if !bytes.Equal(e.read(t, "10-calico.conflist"), fixture(t, "calico-manifest-cni1.0.0.conflist")) {
		t.Error("lexically first file touched although a name is configured")
	}
}

func TestSubdirChaining(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Subdir = true })
	orig := fixture(t, "kindnet-ipv4.conflist")
	e.put(t, "10-kindnet.conflist", orig)
	res, err := e.in.Reconcile()
	if err != nil {
		t.Fatal(err)
	}
	if res.Conf != filepath.Join(e.conf, "kindnet", "mesh-cni.conf") {
		t.Fatalf("conf %s", res.Conf)
	}
	if !bytes.Equal(e.read(t, "10-kindnet.conflist"), orig) {
		t.Error("primary edited in subdir mode")
	}
	// libcni ≥ 1.3 loads the subdir plugin after the inlined ones.
	loadChained(t, filepath.Join(e.conf, "10-kindnet.conflist"))
	if err := e.in.Uninstall(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(e.conf, "kindnet")); !os.IsNotExist(err) {
		t.Errorf("subdir left behind: %v", err)
	}
}

func TestStandalone(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Chained = false })
	e.put(t, "00-multus.conf", fixture(t, "multus-thin-flannel.conf"))
	before := snapshot(t, e.conf)
	res, err := e.in.Reconcile()
	if err != nil {
		t.Fatal(err)
	}
	l := loadChained(t, res.Conf)
	if l.Name != "mesh-cni" || len(l.Plugins) != 1 {
		t.Fatalf("standalone list %s", l.Bytes)
	}
	if err := e.in.Uninstall(); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, before, snapshot(t, e.conf))
}

func TestConversionCrashLeavesLoadableConfig(t *testing.T) {
	// A crash after the .conflist is written and before the .conf is
	// removed leaves both; the .conf sorts first and still loads, and the
	// next pass finishes the job without complaint.
	e := newEnv(t, nil)
	orig := fixture(t, "flannel-legacy-v0.9.1.conf")
	e.put(t, "10-flannel.conf", orig)
	if _, err := e.in.Reconcile(); err != nil {
		t.Fatal(err)
	}
	e.put(t, "10-flannel.conf", orig)
	p, _, err := FindPrimary(e.conf, "")
	if err != nil || filepath.Base(p) != "10-flannel.conf" {
		t.Fatalf("primary %s %v", p, err)
	}
	res, err := e.in.Reconcile()
	if err != nil {
		t.Fatal(err)
	}
	loadChained(t, res.Conf)
	if err := e.in.Uninstall(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(e.read(t, "10-flannel.conf"), orig) {
		t.Error(".conf not restored")
	}
}

func TestConversionRefusesForeignConflist(t *testing.T) {
	e := newEnv(t, nil)
	e.put(t, "10-flannel.conf", fixture(t, "flannel-legacy-v0.9.1.conf"))
	e.put(t, "10-flannel.conflist", fixture(t, "broken-weave-hairpin-True.conflist"))
	before := snapshot(t, e.conf)
	if _, err := e.in.Reconcile(); err == nil || !strings.Contains(err.Error(), "not written by mesh-cni") {
		t.Fatalf("want refusal, got %v", err)
	}
	sameFiles(t, before, snapshot(t, e.conf))
}

func TestUninstallKeepsPrimaryChanges(t *testing.T) {
	// The primary rewrote its file with new content while we were chained;
	// uninstall takes only our entry out and keeps theirs.
	e := newEnv(t, nil)
	e.put(t, "10-calico.conflist", fixture(t, "calico-manifest-portmap-bandwidth.conflist"))
	if _, err := e.in.Reconcile(); err != nil {
		t.Fatal(err)
	}
	newer := fixture(t, "calico-manifest-cni1.0.0.conflist")
	withUs, _ := appendPlugin(newer, e.in.cfg.Entry)
	e.put(t, "10-calico.conflist", withUs)
	if err := e.in.Uninstall(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(e.read(t, "10-calico.conflist"), newer) {
		t.Errorf("got %s", e.read(t, "10-calico.conflist"))
	}
}

func TestBadInput(t *testing.T) {
	t.Run("missing conf dir", func(t *testing.T) {
		e := newEnv(t, nil)
		os.RemoveAll(e.conf)
		if _, err := e.in.Reconcile(); err == nil || !strings.Contains(err.Error(), "conf dir") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("missing bin dir", func(t *testing.T) {
		e := newEnv(t, nil)
		os.RemoveAll(e.bin)
		if _, err := e.in.InstallBinary(); err == nil || !strings.Contains(err.Error(), "bin dir") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("missing plugin in image", func(t *testing.T) {
		e := newEnv(t, nil)
		os.Remove(e.plugin)
		if _, err := e.in.InstallBinary(); err == nil {
			t.Fatal("no error")
		}
	})
	t.Run("unreadable primary", func(t *testing.T) {
		e := newEnv(t, nil)
		if err := os.Symlink(filepath.Join(e.root, "nowhere"), filepath.Join(e.conf, "05-dangling.conflist")); err != nil {
			t.Fatal(err)
		}
		os.Mkdir(filepath.Join(e.conf, "07-dir.conflist"), 0o755)
		e.put(t, "10-kindnet.conflist", fixture(t, "kindnet-ipv4.conflist"))
		res, err := e.in.Reconcile()
		if err != nil || filepath.Base(res.Conf) != "10-kindnet.conflist" {
			t.Fatalf("%+v %v", res, err)
		}
	})
	t.Run("garbage only", func(t *testing.T) {
		e := newEnv(t, nil)
		e.put(t, "10-x.conflist", []byte("\x00\x01garbage{{{"))
		e.put(t, "20-y.conf", []byte(`{"name":"y"}`))
		before := snapshot(t, e.conf)
		_, err := e.in.Reconcile()
		if !errors.Is(err, ErrNoPrimary) || !strings.Contains(err.Error(), "10-x.conflist") || !strings.Contains(err.Error(), "perhaps this is a .conflist") {
			t.Fatalf("unclear error: %v", err)
		}
		sameFiles(t, before, snapshot(t, e.conf))
	})
	t.Run("bad plugin config", func(t *testing.T) {
		for _, raw := range []string{`{"type":"other"}`, `not json`, `{"type":"mesh-cni","type":"mesh-cni"}`, `[]`} {
			if _, err := config.Load([]byte(raw), testHostPaths); err == nil {
				t.Errorf("accepted %s", raw)
			}
		}
	})
}

// The agent's entry: the host paths replace the configured ones, the
// list's keys are left to the list, every default is written out (every
// profile included), and it is marked resolved.
func TestLoadEntry(t *testing.T) {
	e, err := config.Load([]byte(`{"cniVersion":"0.4.0","name":"x","type":"mesh-cni","kubeconfig":"/x","logLevel":"DEBUG",`+
		`"excludeNamespaces":[],"meshes":{"istio":{"ignoreOutboundPorts":[]}}}`), testHostPaths)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(e, &got); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{
		"type": "mesh-cni", "kubeconfig": testHostPaths.Kubeconfig, "agentSocket": testHostPaths.AgentSocket,
		"reportSocket": testHostPaths.ReportSocket, "readyMarker": testHostPaths.ReadyMarker,
		"logLevel": "debug", "backend": "auto", "ipv6": true, "lookupTimeout": "5s", "resolved": true,
		"agentNamespace": "mesh-cni", "agentPodPrefix": "mesh-cni-",
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
	for _, k := range []string{"cniVersion", "name"} {
		if _, ok := got[k]; ok {
			t.Errorf("%s is the list's key, not the entry's: %s", k, e)
		}
	}
	if l, ok := got["excludeNamespaces"].([]any); !ok || len(l) != 0 {
		t.Errorf("excludeNamespaces [] (exclude none) became %v", got["excludeNamespaces"])
	}
	meshes, _ := got["meshes"].(map[string]any)
	for _, name := range mesh.Profiles {
		if _, ok := meshes[name].(map[string]any); !ok {
			t.Errorf("meshes.%s missing: %s", name, e)
		}
	}
	istio, _ := meshes[mesh.Istio].(map[string]any)
	if l, ok := istio["ignoreOutboundPorts"].([]any); !ok || len(l) != 0 || istio["proxyUID"] != 1337.0 {
		t.Errorf("istio: [] must stay [] (it clears the default) and defaults must be written: %v", istio)
	}
}

func TestSymlinkedPrimary(t *testing.T) {
	e := newEnv(t, nil)
	orig := fixture(t, "flannel-kube-flannel.conflist")
	e.put(t, "flannel.conflist", orig)
	if err := os.Symlink("flannel.conflist", filepath.Join(e.conf, "10-flannel.conflist")); err != nil {
		t.Fatal(err)
	}
	res, err := e.in.Reconcile()
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(e.conf, "10-flannel.conflist")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatal("the symlink was replaced")
	}
	loadChained(t, filepath.Join(e.conf, "10-flannel.conflist"))
	if filepath.Base(res.Conf) != "flannel.conflist" {
		t.Errorf("conf %s", res.Conf)
	}
	if err := e.in.Uninstall(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(e.read(t, "flannel.conflist"), orig) {
		t.Error("not restored")
	}
	// A link out of the conf dir is refused, and left alone.
	e2 := newEnv(t, nil)
	outside := filepath.Join(e2.root, "elsewhere.conflist")
	os.WriteFile(outside, orig, 0o644)
	os.Symlink(outside, filepath.Join(e2.conf, "10-flannel.conflist"))
	if _, err := e2.in.Reconcile(); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("got %v", err)
	}
	if b, _ := os.ReadFile(outside); !bytes.Equal(b, orig) {
		t.Error("link target outside the conf dir was edited")
	}
}

func TestUninstallWithoutBackup(t *testing.T) {
	e := newEnv(t, nil)
	e.put(t, "10-flannel.conf", fixture(t, "flannel-legacy-v0.9.1.conf"))
	if _, err := e.in.Reconcile(); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(e.state, "backup"))
	if err := e.in.Uninstall(); err != nil {
		t.Fatal(err)
	}
	l, err := libcni.ConfListFromFile(filepath.Join(e.conf, "10-flannel.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Plugins) != 1 || l.Plugins[0].Network.Type != "flannel" {
		t.Errorf("got %s", l.Bytes)
	}
}

// The plugin and its helper mesh-cni-podget go into the bin dir together:
// installed, updated when the image's copy changes, put back when removed,
// and removed together.
func TestBinaries(t *testing.T) {
	e := newEnv(t, nil)
	same := func(src, dst string) {
		t.Helper()
		want, _ := os.ReadFile(src)
		got, err := os.ReadFile(dst)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %q %v, want %q", dst, got, err, want)
		}
		if fi, err := os.Stat(dst); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s: mode %v %v", dst, fi.Mode(), err)
		}
	}
	install := func(wantChanged bool) {
		t.Helper()
		changed, err := e.in.InstallBinary()
		if err != nil || changed != wantChanged {
			t.Fatalf("InstallBinary: changed %v, %v; want changed %v", changed, err, wantChanged)
		}
		same(e.plugin, e.in.BinaryPath())
		same(e.helper, e.in.HelperPath())
		if err := e.in.BinaryInstalled(); err != nil {
			t.Error(err)
		}
	}
	if e.in.HelperPath() != filepath.Join(e.bin, "mesh-cni-podget") {
		t.Errorf("helper path %s", e.in.HelperPath())
	}
	install(true)
	install(false)
	// A new image: the helper changed alone, then the plugin alone.
	os.WriteFile(e.helper, []byte("#!/bin/sh\necho podget v2\n"), 0o755)
	install(true)
	os.WriteFile(e.plugin, []byte("#!/bin/sh\necho plugin v2\n"), 0o755)
	install(true)
	// Removed or changed on the host: put back.
	os.Remove(e.in.HelperPath())
	if err := e.in.BinaryInstalled(); err == nil || !strings.Contains(err.Error(), "mesh-cni-podget") {
		t.Errorf("BinaryInstalled without the helper: %v", err)
	}
	install(true)
	os.WriteFile(e.in.HelperPath(), []byte("tampered"), 0o755)
	if err := e.in.BinaryInstalled(); err == nil || !strings.Contains(err.Error(), "differs") {
		t.Errorf("BinaryInstalled with a changed helper: %v", err)
	}
	install(true)

	if err := e.in.RemoveBinary(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{e.in.BinaryPath(), e.in.HelperPath()} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left after RemoveBinary: %v", p, err)
		}
	}
	if err := e.in.RemoveBinary(); err != nil {
		t.Errorf("RemoveBinary with nothing left: %v", err)
	}

	// An image without the helper is refused: the plugin would fail every
	// pod the agent cannot answer for.
	os.Remove(e.helper)
	if _, err := e.in.InstallBinary(); err == nil || !strings.Contains(err.Error(), "install mesh-cni-podget") {
		t.Errorf("image without the helper: %v", err)
	}
	// Without HelperBinary the plugin goes alone (and RemoveBinary still
	// takes a helper an earlier install left).
	e2 := newEnv(t, func(c *Config) { c.HelperBinary = "" })
	if _, err := e2.in.InstallBinary(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(e2.in.HelperPath()); !os.IsNotExist(err) {
		t.Errorf("helper installed without HelperBinary: %v", err)
	}
	os.WriteFile(e2.in.HelperPath(), []byte("old"), 0o755)
	if err := e2.in.RemoveBinary(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(e2.in.HelperPath()); !os.IsNotExist(err) {
		t.Errorf("helper left: %v", err)
	}
}
