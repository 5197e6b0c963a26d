package install

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/mesh-cni/mesh-cni/internal/config"
)

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
