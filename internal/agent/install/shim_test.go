package install

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// A pod istio-cni set up keeps its cached config (libcni's cache; CRI-O
// replays DEL with it). Once istio-cni's installer deleted its binary on
// exit, that DEL fails in libcni ("failed to find plugin"); the agent then
// places the plugin binary under that name, and the DEL succeeds, doing
// nothing, as istio-cni's own DEL did. A binary of theirs is never
// touched, and uninstall removes only the stand-in it placed.
func TestShimAnswersCachedDelAfterOldBinaryGone(t *testing.T) {
	plugin := testenv.GoBinary(t, "plugin", "mesh-cni")
	e := newEnv(t, func(c *Config) { c.MigrateFrom = "istio-cni"; c.PluginBinary = plugin })
	e.put(t, "10-kindnet.conflist", injectEntry(t, fixture(t, "kindnet-ipv4.conflist"), istioEntry))
	theirs := filepath.Join(e.bin, "istio-cni")
	if err := os.WriteFile(theirs, []byte("#!/bin/sh\necho istio-cni\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// What the runtime cached when it set the pod up.
	cached, err := libcni.ConfListFromBytes([]byte(`{"cniVersion": "0.3.1", "name": "kindnet", "plugins": [` + istioEntry + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	cni := libcni.NewCNIConfigWithCacheDir([]string{e.bin}, t.TempDir(), nil)
	rt := &libcni.RuntimeConf{ContainerID: "c1", NetNS: "/var/run/netns/mesh-cni-test-gone", IfName: "eth0"}
	del := func() error { return cni.DelNetworkList(context.Background(), cached, rt) }

	if st := e.in.pass(); st.Err != nil || st.Replaced != 1 {
		t.Fatalf("takeover pass: %+v", st)
	}
	if b, _ := os.ReadFile(theirs); !strings.Contains(string(b), "echo istio-cni") {
		t.Fatal("their binary was replaced while present")
	}
	os.Remove(theirs) // their installer's cleanup
	if err := del(); err == nil || !strings.Contains(err.Error(), "failed to find plugin") {
		t.Fatalf("DEL with the binary gone: %v; want libcni's failed to find plugin", err)
	}
	if st := e.in.pass(); st.Err != nil {
		t.Fatal(st.Err)
	}
	if err := del(); err != nil {
		t.Errorf("cached DEL after the stand-in was placed: %v", err)
	}
	_, err = cni.AddNetworkList(context.Background(), cached, rt)
	if err == nil || !strings.Contains(err.Error(), "replaced by mesh-cni") {
		t.Errorf("ADD through the stand-in: %v; want a refusal", err)
	}
	if v, err := cni.GetVersionInfo(context.Background(), "istio-cni"); err != nil || !slices.Contains(v.SupportedVersions(), "0.3.1") {
		t.Errorf("VERSION: %v %v", v, err)
	}

	// Their binary back (their DaemonSet reinstalled): ours to leave.
	if err := os.WriteFile(theirs, []byte("#!/bin/sh\necho istio-cni v2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if st := e.in.pass(); st.Err != nil {
		t.Fatal(st.Err)
	}
	if err := e.in.Uninstall(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(theirs); !strings.Contains(string(b), "v2") {
		t.Error("uninstall removed or replaced their binary")
	}
	// Gone again: the stand-in is placed, and uninstall removes it.
	os.Remove(theirs)
	if st := e.in.pass(); st.Err != nil {
		t.Fatal(st.Err)
	}
	if _, err := os.Stat(theirs); err != nil {
		t.Fatalf("stand-in not placed: %v", err)
	}
	if err := e.in.Uninstall(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(theirs); !os.IsNotExist(err) {
		t.Errorf("uninstall left the stand-in: %v", err)
	}
}

// The plugin's list of names it answers as is the agent's list.
func TestShimNamesAreMigrateSources(t *testing.T) {
	b, err := os.ReadFile("../../../plugin/retired.go")
	if err != nil {
		t.Fatal(err)
	}
	want := `var retiredPlugins = []string{"` + strings.Join(MigrateSources, `", "`) + `"}`
	if !strings.Contains(string(b), want) {
		t.Errorf("plugin/retired.go does not declare %s", want)
	}
}
