package install

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/mesh-cni/mesh-cni/internal/config"
)

// FuzzEntry: the agent and the plugin agree on the chain entry.
//
//   - What the agent accepts (config.Load), the plugin accepts as the
//     runtime hands it over: chained into a real conflist, loaded by libcni,
//     with name, cniVersion and the runtime config injected.
//   - It means the same: the plugin reading the resolved entry (no default
//     applied) ends with the settings and meshes it gets from the configured
//     entry itself (every default applied on the spot), and so does a plugin
//     that ignores the "resolved" mark, as one older than the mark does.
//   - What the plugin accepts, the agent does not refuse, except on purpose:
//     a key the type does not know (the plugin ignores it; the agent refuses
//     typos), a key written twice (encoding/json keeps the last, so the
//     entry is ambiguous), and "resolved" in a configured entry (only the
//     agent writes it).
func FuzzEntry(f *testing.F) {
	for _, s := range []string{
		testPluginJSON,
		`{"type":"mesh-cni"}`,
		`{"type":"mesh-cni","backend":"nft","meshes":{"istio":{"proxyUID":-5}}}`,
		`{"type":"mesh-cni","lookupTimeout":"2s","excludeNamespaces":[],"ipv6":false}`,
		`{"type":"mesh-cni","meshes":{"custom":{"proxyUID":1337,"inboundPort":15006,"outboundPort":15001}}}`,
		`{"type":"mesh-cni","meshes":{"custom":{"selectAnnotation":"a=b","proxyUID":1,"inboundPort":2,"outboundPort":3,"portsToRedirect":[]}}}`,
		`{"type":"mesh-cni","meshes":{"istio":{"ignoreOutboundPorts":[],"proxyGID":-1,"includeSubnets":["*"]},"linkerd":{"enabled":false,"proxyUID":-9}}}`,
		`{"type":"mesh-cni","kubeconfig":"relative","cniVersion":"1.0.0","name":"x"}`,
		`{"type":"mesh-cni","logLevel":"DEBUG","agentNamespace":"a-b"}`,
		`{"type":"mesh-cni","resolved":true}`,
		`{"type":"mesh-cni","backend":"auto","backend":"nftables"}`,
	} {
		f.Add([]byte(s))
	}
	primary := []byte(`{"cniVersion":"1.0.0","name":"kindnet","plugins":[{"type":"ptp","ipam":{"type":"host-local"}}]}`)
	f.Fuzz(func(t *testing.T, raw []byte) {
		entry, err := config.Load(raw, testHostPaths)
		if err != nil {
			var probe struct {
				Type string `json:"type"`
			}
			if json.Unmarshal(raw, &probe) != nil || probe.Type != "mesh-cni" {
				return
			}
			deliberate := strings.Contains(err.Error(), "unsupported key") || strings.Contains(err.Error(), "duplicate key") ||
				strings.Contains(err.Error(), "invalid resolved")
			if _, perr := config.Parse(raw); perr == nil && !deliberate {
				t.Fatalf("the agent refuses what the plugin accepts: %v\n%s", err, raw)
			}
			return
		}
		out, err := appendPlugin(primary, entry)
		if err != nil {
			t.Fatalf("cannot chain an accepted entry: %v\n%s", err, entry)
		}
		list, err := libcni.ConfListFromBytes(out)
		if err != nil {
			t.Fatalf("libcni cannot load the chain: %v\n%s", err, out)
		}
		last := list.Plugins[len(list.Plugins)-1]
		stdin, err := libcni.InjectConf(last, map[string]any{
			"name": list.Name, "cniVersion": list.CNIVersion,
			"runtimeConfig": map[string]any{"io.kubernetes.cri.pod-annotations": map[string]string{}},
		})
		if err != nil {
			t.Fatalf("inject: %v", err)
		}
		resolved, err := config.Parse(stdin.Bytes)
		if err != nil {
			t.Fatalf("the plugin rejects what the agent accepted: %v\n%s", err, stdin.Bytes)
		}
		if !resolved.Resolved {
			t.Fatalf("the agent's entry is not marked resolved: %s", entry)
		}
		asWritten, err := config.Parse(withPaths(t, raw))
		if err != nil {
			t.Fatalf("the plugin rejects the configured entry the agent accepted: %v\n%s", err, raw)
		}
		sameMeaning(t, "the configured entry", asWritten, resolved)
		var m map[string]any
		if err := json.Unmarshal(stdin.Bytes, &m); err != nil {
			t.Fatal(err)
		}
		delete(m, "resolved")
		unmarked, _ := json.Marshal(m)
		old, err := config.Parse(unmarked)
		if err != nil {
			t.Fatalf("a plugin that ignores the mark rejects the agent's entry: %v\n%s", err, unmarked)
		}
		sameMeaning(t, "the resolved entry read without its mark", old, resolved)
	})
}

// withPaths puts the host paths into a configured entry, as the agent does,
// so that it can be compared with the agent's.
func withPaths(t *testing.T, raw []byte) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("the agent accepted what is not an object: %v\n%s", err, raw)
	}
	for k, v := range map[string]string{"kubeconfig": testHostPaths.Kubeconfig, "agentSocket": testHostPaths.AgentSocket,
		"reportSocket": testHostPaths.ReportSocket, "readyMarker": testHostPaths.ReadyMarker} {
		m[k], _ = json.Marshal(v)
	}
	b, _ := json.Marshal(m)
	return b
}

// sameMeaning compares what the plugin acts on.
func sameMeaning(t *testing.T, what string, got, want *config.NetConf) {
	t.Helper()
	g, w := got.Settings, want.Settings
	g.RawMeshes, w.RawMeshes, g.Resolved, w.Resolved = nil, nil, false, false
	if !reflect.DeepEqual(g, w) || got.Timeout != want.Timeout {
		t.Fatalf("%s means other settings than the agent's entry:\n%+v\n%+v", what, g, w)
	}
	if !reflect.DeepEqual(got.Meshes, want.Meshes) || !reflect.DeepEqual(got.MeshSet, want.MeshSet) {
		gb, _ := json.Marshal(got.Meshes)
		wb, _ := json.Marshal(want.Meshes)
		if !bytes.Equal(gb, wb) {
			t.Fatalf("%s means other meshes than the agent's entry:\n%s\n%s", what, gb, wb)
		}
		t.Fatalf("%s resolves other mesh rules than the agent's entry:\n%+v\n%+v", what, got.MeshSet, want.MeshSet)
	}
}
