package install

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/mesh-cni/mesh-cni/pkg/config"
	"github.com/mesh-cni/mesh-cni/pkg/node"
)

// HostPaths are the host-side paths the plugin must use; they replace
// whatever the configured entry says, so the chart cannot get them out of
// step with where the agent actually writes.
type HostPaths struct {
	Kubeconfig   string
	AgentSocket  string
	ReportSocket string
	ReadyMarker  string
}

// BuildEntry validates the configured chain entry and fills in the host
// paths. Members keep their order; list-level keys (name, cniVersion) are
// dropped because the list provides them. The result is compact JSON that
// the plugin's own parser (config.Parse) accepts: an entry it would reject
// fails every pod on the node, so it is never chained.
func BuildEntry(raw []byte, hp HostPaths) ([]byte, error) {
	root, err := rootObject(raw)
	if err != nil {
		return nil, fmt.Errorf("plugin config: %w", err)
	}
	ms, err := objectMembers(raw, root)
	if err != nil {
		return nil, fmt.Errorf("plugin config: %w", err)
	}
	set := map[string]string{
		"kubeconfig":   hp.Kubeconfig,
		"agentSocket":  hp.AgentSocket,
		"reportSocket": hp.ReportSocket,
		"readyMarker":  hp.ReadyMarker,
	}
	order := []string{"kubeconfig", "agentSocket", "reportSocket", "readyMarker"}
	var buf bytes.Buffer
	buf.WriteByte('{')
	n := 0
	write := func(k string, v []byte) {
		if n > 0 {
			buf.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		buf.Write(kb)
		buf.WriteByte(':')
		buf.Write(v)
		n++
	}
	seen := map[string]bool{}
	typ := ""
	for _, m := range ms {
		if seen[m.key] {
			return nil, fmt.Errorf("plugin config: duplicate key %q", m.key)
		}
		seen[m.key] = true
		v := raw[m.value.start:m.value.end]
		switch m.key {
		case "name", "cniVersion", "cniVersions":
			continue
		case "type":
			if err := json.Unmarshal(v, &typ); err != nil {
				return nil, fmt.Errorf("plugin config: type: %w", err)
			}
		}
		if p, ok := set[m.key]; ok && p != "" {
			v, _ = json.Marshal(p)
		}
		write(m.key, v)
	}
	if typ != node.PluginType {
		return nil, fmt.Errorf("plugin config: type is %q, want %q", typ, node.PluginType)
	}
	for _, k := range order {
		if !seen[k] && set[k] != "" {
			v, _ := json.Marshal(set[k])
			write(k, v)
		}
	}
	buf.WriteByte('}')
	var c bytes.Buffer
	if err := json.Compact(&c, buf.Bytes()); err != nil {
		return nil, fmt.Errorf("plugin config: %w", err)
	}
	if _, err := config.Parse(c.Bytes()); err != nil {
		return nil, fmt.Errorf("plugin config: %w", err)
	}
	return c.Bytes(), nil
}

// EntryBackend is the backend a built entry asks for ("auto" when unset).
func EntryBackend(entry []byte) string {
	var e struct {
		Backend string `json:"backend"`
	}
	if json.Unmarshal(entry, &e) != nil || e.Backend == "" {
		return config.DefaultBackend
	}
	return e.Backend
}

// jsonEqual compares two JSON values by meaning (order of keys ignored).
func jsonEqual(a, b []byte) bool {
	var va, vb any
	da := json.NewDecoder(bytes.NewReader(a))
	da.UseNumber()
	db := json.NewDecoder(bytes.NewReader(b))
	db.UseNumber()
	if da.Decode(&va) != nil || db.Decode(&vb) != nil {
		return false
	}
	ca, _ := json.Marshal(va)
	cb, _ := json.Marshal(vb)
	return bytes.Equal(ca, cb)
}

// convertConf wraps a single-plugin config into a conflist that keeps its
// name and cniVersion (what the runtime's ConfListFromConf would build) and
// the plugin object's own bytes, indented one level.
func convertConf(conf []byte) ([]byte, error) {
	root, err := rootObject(conf)
	if err != nil {
		return nil, err
	}
	ms, err := objectMembers(conf, root)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.WriteString("{\n")
	if m, ok := findMember(ms, "cniVersion"); ok {
		fmt.Fprintf(&buf, "  \"cniVersion\": %s,\n", conf[m.value.start:m.value.end])
	}
	name := []byte(`""`)
	if m, ok := findMember(ms, "name"); ok {
		name = conf[m.value.start:m.value.end]
	}
	fmt.Fprintf(&buf, "  \"name\": %s,\n", name)
	buf.WriteString("  \"plugins\": [\n    ")
	obj := conf[root.start:root.end]
	buf.Write(bytes.ReplaceAll(obj, []byte("\n"), []byte("\n    ")))
	buf.WriteString("\n  ]\n}\n")
	return buf.Bytes(), nil
}

// standaloneList is the conflist we own when not chaining (Multus).
func standaloneList(entry []byte) ([]byte, error) {
	doc := []byte("{\n  \"cniVersion\": \"1.0.0\",\n  \"name\": \"mesh-cni\",\n  \"plugins\": []\n}\n")
	return appendPlugin(doc, entry)
}
