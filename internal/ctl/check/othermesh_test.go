package check

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mesh-cni/mesh-cni/internal/agent"
	"github.com/mesh-cni/mesh-cni/internal/node"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// A node whose agent chained mesh-cni beside istio-cni is ready, yet the
// check fails on it, naming the plugin, what it does to pods and the fix;
// nodes without one pass.
func TestNoOtherMeshPlugin(t *testing.T) {
	env := testenv.Start(t)
	opts := Options{Namespace: "mesh-cni", Version: "v1"}
	conf := "/etc/cni/net.d/10-kindnet.conflist"
	status := func(others ...string) string {
		b, err := json.Marshal(agent.Status{Ready: true, Others: others, Marker: node.Marker{Version: "v1", Backend: "nftables",
			Binary: "/opt/cni/bin/mesh-cni", Conf: conf, Kubeconfig: "/var/lib/mesh-cni/kubeconfig", Time: time.Now().UTC()}})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	makeNode(t, env, "plain", nodeSpec{status: status()})
	makeNode(t, env, "old", nodeSpec{status: readyStatus("v1", time.Now())}) // an agent from before the field
	makeNode(t, env, "garbage", nodeSpec{status: "{"})                       // AgentsReady reports it
	makeNode(t, env, "none", nodeSpec{})
	r := runOne(t, env, NoOtherMeshPlugin, opts)
	wantStatus(t, r, OK)
	if r.Message != "4/4 nodes" {
		t.Errorf("message %q", r.Message)
	}

	makeNode(t, env, "both", nodeSpec{status: status("istio-cni")})
	makeNode(t, env, "cordoned", nodeSpec{status: status("istio-cni"), unschedulable: true})
	makeNode(t, env, "three", nodeSpec{status: status("istio-cni", "linkerd-cni")})
	r = runOne(t, env, NoOtherMeshPlugin, opts)
	wantStatus(t, r, Fail,
		"node both: istio-cni chained beside mesh-cni in "+conf,
		"node three: istio-cni, linkerd-cni chained beside mesh-cni in "+conf)
	if r.Message != "2/6 nodes run istio-cni and linkerd-cni as well" {
		t.Errorf("message %q", r.Message)
	}
	for _, s := range []string{"both plugins' redirection", "TPROXY", "no answer on any TCP connection through eth0",
		"--set migrateFrom=istio-cni", "--set migrateFrom=linkerd-cni", "uninstall mesh-cni"} {
		if !strings.Contains(r.Hint, s) {
			t.Errorf("hint %q lacks %q", r.Hint, s)
		}
	}
	if !strings.HasPrefix(r.Hint, node.OtherMeshEffect) {
		t.Errorf("hint %q does not start with the agent's words %q", r.Hint, node.OtherMeshEffect)
	}
}
