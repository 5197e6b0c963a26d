package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/mesh-cni/mesh-cni/internal/agent"
	"github.com/mesh-cni/mesh-cni/internal/agent/install"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// primaryPlugins puts stand-ins that succeed for the primary config's
// plugins (and IPAM plugins) into binDir, as a real node's bin dir holds
// them; without them the agent refuses to chain.
func primaryPlugins(t testing.TB, binDir string, conf []byte) {
	t.Helper()
	for _, typ := range install.PluginBinaries(conf) {
		if err := os.WriteFile(filepath.Join(binDir, typ), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// refuseNode is a temp node tree for the real agent and plugin binaries.
type refuseNode struct {
	root, primary, probe string
	logs                 testenv.Buffer
}

func (n *refuseNode) d(p string) string { return filepath.Join(n.root, p) }

// readyz is the agent's /readyz: whether it is ready, and its body.
func (n *refuseNode) readyz() (bool, string) {
	r, err := http.Get("http://" + n.probe + "/readyz")
	if err != nil {
		return false, ""
	}
	defer r.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(r.Body)
	return r.StatusCode == 200, b.String()
}

// nodeRig runs the real agent (with the chart's RBAC, against a real
// kube-apiserver) and the real plugin on temp node trees.
type nodeRig struct {
	env                    *testenv.Env
	ns, token, bin, plugin string
	orig                   []byte // the primary's conflist
	u                      *url.URL
}

// podget is mesh-cni-podget, built beside the plugin.
func (r *nodeRig) podget() string { return filepath.Join(filepath.Dir(r.plugin), "mesh-cni-podget") }

func newNodeRig(t *testing.T) *nodeRig {
	env := testenv.Start(t)
	r := &nodeRig{env: env, bin: buildAgent(t), plugin: filepath.Join(t.TempDir(), "mesh-cni")}
	r.ns, _, r.token = agentClient(t, env)
	if out, err := exec.Command("go", "build", "-o", r.plugin, "../plugin").CombinedOutput(); err != nil {
		t.Fatalf("build plugin: %v\n%s", err, out)
	}
	if out, err := exec.Command("go", "build", "-o", r.podget(), "../cmd/mesh-cni-podget").CombinedOutput(); err != nil {
		t.Fatalf("build mesh-cni-podget: %v\n%s", err, out)
	}
	var err error
	if r.orig, err = os.ReadFile("../internal/agent/install/testdata/conflists/kindnet-ipv4.conflist"); err != nil {
		t.Fatal(err)
	}
	r.u, _ = url.Parse(env.Host)
	return r
}

// node makes a node tree and starts the agent on it; primaryBins puts the
// primary's own plugins (as stand-ins that succeed) into the bin dir.
func (r *nodeRig) node(t *testing.T, nodeName, settings string, primaryBins bool, extra ...string) *refuseNode {
	n := &refuseNode{root: t.TempDir(), probe: freeAddrT(t)}
	for _, p := range []string{"host/opt/cni/bin", "host/etc/cni/net.d", "sa", "cfg", "host/usr/sbin"} {
		os.MkdirAll(n.d(p), 0o755)
	}
	if primaryBins {
		primaryPlugins(t, n.d("host/opt/cni/bin"), r.orig)
	}
	n.primary = n.d("host/etc/cni/net.d/10-kindnet.conflist")
	os.WriteFile(n.primary, r.orig, 0o644)
	os.WriteFile(n.d("sa/token"), []byte(r.token), 0o600)
	os.WriteFile(n.d("sa/ca.crt"), r.env.CAData, 0o600)
	os.WriteFile(n.d("cfg/plugin.json"), []byte(settings), 0o644)
	r.env.Node(t, nodeName)
	startAgent(t, r.bin, r.u, nodeName, r.ns, &n.logs, append([]string{"--cni-bin-dir", n.d("host/opt/cni/bin"), "--cni-conf-dir", n.d("host/etc/cni/net.d"),
		"--state-dir", n.d("host/var/lib/mesh-cni"), "--run-dir", n.d("host/var/run/mesh-cni"),
		"--host-state-dir", n.d("host/var/lib/mesh-cni"), "--host-run-dir", n.d("host/var/run/mesh-cni"),
		"--plugin-config", n.d("cfg/plugin.json"), "--plugin-binary", r.plugin, "--podget-binary", r.podget(), "--host-tool-dirs", n.d("host/usr/sbin"),
		"--token-path", n.d("sa/token"), "--probe-addr", n.probe, "--metrics-addr", freeAddrT(t), "--repair=false"}, extra...)...)
	return n
}

// TestAgentRefuses runs the real agent with the chart's RBAC against a
// real kube-apiserver through the three mistakes of a bad plugin setting,
// a wrong bin dir and a backend the host lacks: each time nothing is
// chained or the last good entry stays, the agent is not ready and says
// why on /readyz and the Node, and a Warning Event is on the Node.
func TestAgentRefuses(t *testing.T) {
	r := newNodeRig(t)
	env, ns, orig, setup := r.env, r.ns, r.orig, r.node
	ctx := context.Background()
	readyz := func(n *refuseNode) (bool, string) { return n.readyz() }

	// refused waits for every report of the refusal: /readyz, the Node's
	// status annotation and a Warning Event on the Node, each naming want.
	refused := func(t *testing.T, n *refuseNode, nodeName, want string) {
		t.Helper()
		waitFor(t, func() bool { ok, body := readyz(n); return !ok && strings.Contains(body, want) })
		waitFor(t, func() bool {
			no, err := env.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
			if err != nil {
				return false
			}
			raw := no.Annotations[agent.StatusAnnotation]
			return strings.Contains(raw, `"ready":false`) && strings.Contains(raw, want)
		})
		waitFor(t, func() bool {
			evs, err := env.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
				"involvedObject.kind": "Node", "involvedObject.name": nodeName, "reason": agent.ReasonRefused}.String()})
			if err != nil {
				return false
			}
			for _, e := range evs.Items {
				if e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, want) {
					return true
				}
			}
			return false
		})
		if l := n.logs.String(); strings.Contains(l, "forbidden") {
			t.Errorf("the chart's RBAC forbade something:\n%s", l)
		}
	}
	// del runs DEL of a kube-system pod through the runtime's library and
	// the real plugin, as the runtime would on the chained config.
	del := func(t *testing.T, n *refuseNode) {
		t.Helper()
		list, err := libcni.ConfListFromFile(n.primary)
		if err != nil {
			t.Fatal(err)
		}
		rt := &libcni.RuntimeConf{ContainerID: "c1", NetNS: "", IfName: "eth0", Args: [][2]string{
			{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "kube-system"}, {"K8S_POD_NAME", "coredns-1"}}}
		c := libcni.NewCNIConfigWithCacheDir([]string{n.d("host/opt/cni/bin")}, n.d("cache"), nil)
		if err := c.DelNetworkList(ctx, list, rt); err != nil {
			t.Fatalf("DEL on the kept chain: %v", err)
		}
	}

	// status sends STATUS to our entry, taken from the chain and put in a
	// 1.1.0 list of its own, through the runtime's library.
	status := func(t *testing.T, n *refuseNode) error {
		t.Helper()
		data, err := os.ReadFile(n.primary)
		if err != nil {
			t.Fatal(err)
		}
		var l struct {
			Plugins []json.RawMessage `json:"plugins"`
		}
		if err := json.Unmarshal(data, &l); err != nil {
			t.Fatal(err)
		}
		var ours []byte
		for _, p := range l.Plugins {
			var typ struct{ Type string }
			if json.Unmarshal(p, &typ) == nil && typ.Type == "mesh-cni" {
				ours = p
			}
		}
		if ours == nil {
			t.Fatalf("no mesh-cni entry in %s", data)
		}
		list, err := libcni.ConfListFromBytes([]byte(`{"cniVersion":"1.1.0","name":"status","plugins":[` + string(ours) + `]}`))
		if err != nil {
			t.Fatal(err)
		}
		return libcni.NewCNIConfigWithCacheDir([]string{n.d("host/opt/cni/bin")}, n.d("cache"), nil).GetStatusNetworkList(ctx, list)
	}
	t.Run("bad setting keeps the last good entry", func(t *testing.T) {
		nodeName := "bad-" + ns
		n := setup(t, nodeName, `{"type":"mesh-cni","backend":"nftables"}`, true)
		waitFor(t, func() bool { ok, _ := readyz(n); return ok })
		good, _ := os.ReadFile(n.primary)
		os.WriteFile(n.d("cfg/.new"), []byte(`{"type":"mesh-cni","backend":"nft","meshes":{"istio":{"proxyUID":-5}}}`), 0o644)
		os.Rename(n.d("cfg/.new"), n.d("cfg/plugin.json"))
		refused(t, n, nodeName, "invalid backend")
		if now, _ := os.ReadFile(n.primary); !bytes.Equal(now, good) {
			t.Errorf("chain changed:\n%s", now)
		}
		del(t, n)
		// The kept entry still serves ADD, so STATUS (what a runtime asks
		// of a 1.1.0 list before it starts pods) must say so.
		if err := status(t, n); err != nil {
			t.Errorf("STATUS through the kept entry while the new settings are refused: %v", err)
		}
	})
	t.Run("bad setting at start chains nothing", func(t *testing.T) {
		nodeName := "badstart-" + ns
		n := setup(t, nodeName, `{"type":"mesh-cni","meshes":{"istio":{"proxyUID":-5}}}`, true)
		refused(t, n, nodeName, "proxyUID")
		if now, _ := os.ReadFile(n.primary); !bytes.Equal(now, orig) {
			t.Errorf("primary changed:\n%s", now)
		}
		if _, err := os.Stat(n.d("host/var/run/mesh-cni/ready")); !os.IsNotExist(err) {
			t.Errorf("readiness marker with nothing chained: %v", err)
		}
	})
	t.Run("wrong bin dir", func(t *testing.T) {
		nodeName := "bindir-" + ns
		n := setup(t, nodeName, `{"type":"mesh-cni"}`, false)
		refused(t, n, nodeName, "lacks ptp, host-local, portmap")
		if now, _ := os.ReadFile(n.primary); !bytes.Equal(now, orig) {
			t.Errorf("primary changed:\n%s", now)
		}
	})
	t.Run("backend binaries missing", func(t *testing.T) {
		nodeName := "tools-" + ns
		n := setup(t, nodeName, `{"type":"mesh-cni","backend":"iptables-legacy"}`, true)
		refused(t, n, nodeName, "iptables-legacy-restore")
		if now, _ := os.ReadFile(n.primary); !bytes.Equal(now, orig) {
			t.Errorf("primary changed:\n%s", now)
		}
	})
}
