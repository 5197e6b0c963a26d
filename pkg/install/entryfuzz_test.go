package install

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/mesh-cni/mesh-cni/pkg/config"
)

// FuzzEntry: the agent and the plugin agree on the chain entry. What the
// agent accepts, the plugin accepts as the runtime hands it over (chained
// into a real conflist, loaded by libcni, with name, cniVersion and the
// runtime config injected); and what the plugin accepts, the agent does not
// refuse, except for a repeated key (encoding/json keeps the last, so the
// agent refuses it as ambiguous) and a "type" key spelled in another case
// (encoding/json matches keys case-insensitively; the agent wants "type").
func FuzzEntry(f *testing.F) {
	for _, s := range []string{
		testPluginJSON,
		`{"type":"mesh-cni"}`,
		`{"type":"mesh-cni","backend":"nft","meshes":{"istio":{"proxyUID":-5}}}`,
		`{"type":"mesh-cni","lookupTimeout":"2s","excludeNamespaces":[],"ipv6":false}`,
		`{"type":"mesh-cni","meshes":{"custom":{"proxyUID":1337,"inboundPort":15006,"outboundPort":15001}}}`,
		`{"type":"mesh-cni","kubeconfig":"relative","cniVersion":"1.0.0","name":"x"}`,
		`{"type":"mesh-cni","logLevel":"DEBUG","agentNamespace":"a-b"}`,
	} {
		f.Add([]byte(s))
	}
	primary := []byte(`{"cniVersion":"1.0.0","name":"kindnet","plugins":[{"type":"ptp","ipam":{"type":"host-local"}}]}`)
	f.Fuzz(func(t *testing.T, raw []byte) {
		entry, err := BuildEntry(raw, testHostPaths)
		if err != nil {
			var probe struct {
				Type string `json:"type"`
			}
			if json.Unmarshal(raw, &probe) != nil || probe.Type != "mesh-cni" {
				return
			}
			deliberate := strings.Contains(err.Error(), "duplicate key") || strings.Contains(err.Error(), `type is ""`)
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
		if _, err := config.Parse(stdin.Bytes); err != nil {
			t.Fatalf("the plugin rejects what the agent accepted: %v\n%s", err, stdin.Bytes)
		}
	})
}
