package config

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/mesh"
)

// jsonKeys lists a struct type's JSON keys, in order.
func jsonKeys(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

// Keys has a row for every key of Settings and nothing else, and MeshKeys
// one for every field of mesh.Config, so a key cannot be added without its
// default, check and doc.
func TestKeyTablesCoverTheType(t *testing.T) {
	var names []string
	for _, k := range Keys {
		names = append(names, k.Name)
		if k.Doc == "" || (k.Default == nil && k.DefaultText == "") || (k.Schema == nil && k.Source == "") {
			t.Errorf("key %s lacks its doc, default or source: %+v", k.Name, k)
		}
	}
	want := append([]string{"type", "capabilities"}, jsonKeys(reflect.TypeFor[Settings]())...)
	slices.Sort(want)
	slices.Sort(names)
	if !slices.Equal(names, want) {
		t.Errorf("Keys %v, want the entry's keys %v", names, want)
	}
	var meshNames []string
	for _, k := range MeshKeys {
		meshNames = append(meshNames, k.Name)
		if k.Doc == "" || k.Type == nil {
			t.Errorf("mesh key %s lacks its doc or type", k.Name)
		}
	}
	if want := jsonKeys(reflect.TypeFor[mesh.Config]()); !slices.Equal(meshNames, want) {
		t.Errorf("MeshKeys %v, want mesh.Config's %v", meshNames, want)
	}
}

// The agent writes exactly the defaults the table documents, and every
// profile's defaults.
func TestResolveWritesTheTableDefaults(t *testing.T) {
	b, err := Load([]byte(`{"type":"mesh-cni"}`), HostPaths{})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range Keys {
		switch {
		case k.Name == "resolved":
			if string(got[k.Name]) != "true" {
				t.Errorf("resolved = %s, want true", got[k.Name])
			}
		case k.Default != nil:
			if !jsonSame(got[k.Name], []byte(jsonText(k.Default))) {
				t.Errorf("%s = %s, the table says %s", k.Name, got[k.Name], jsonText(k.Default))
			}
		case got[k.Name] == nil:
			t.Errorf("%s is not written", k.Name)
		}
	}
	var meshes map[string]json.RawMessage
	if err := json.Unmarshal(got["meshes"], &meshes); err != nil {
		t.Fatal(err)
	}
	for _, name := range mesh.Profiles {
		d, _ := mesh.Defaults(name)
		want, _ := json.Marshal(d)
		if !jsonSame(meshes[name], want) {
			t.Errorf("meshes.%s = %s, want the profile's defaults %s", name, meshes[name], want)
		}
	}
}

func jsonSame(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// A resolved entry is not defaulted again: a key missing from it stays
// missing (and fails), where the same entry without the mark takes the
// default.
func TestResolvedEntryIsNotDefaultedAgain(t *testing.T) {
	b, err := Load([]byte(`{"type":"mesh-cni"}`), HostPaths{})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	delete(m["meshes"].(map[string]any)[mesh.Istio].(map[string]any), "proxyUID")
	delete(m, "logLevel")
	b, _ = json.Marshal(m)
	if _, err := Parse(b); err == nil || !strings.Contains(err.Error(), `"logLevel" is missing from a resolved entry`) {
		t.Errorf("resolved entry without logLevel: %v, want it refused", err)
	}
	for _, k := range []string{"ipv6", "agentPodPrefix", "excludeNamespaces"} {
		c := maps.Clone(m)
		c["logLevel"] = "info"
		delete(c, k)
		b, _ := json.Marshal(c)
		if _, err := Parse(b); err == nil || !strings.Contains(err.Error(), `"`+k+`" is missing`) {
			t.Errorf("resolved entry without %s: %v, want it refused", k, err)
		}
	}
	m["logLevel"] = "info"
	b, _ = json.Marshal(m)
	if _, err := Parse(b); err == nil || !strings.Contains(err.Error(), "meshes.istio.proxyUID: is required") {
		t.Errorf("resolved entry without istio's proxyUID: %v, want it refused", err)
	}
	delete(m, "resolved")
	b, _ = json.Marshal(m)
	c, err := Parse(b)
	if err != nil {
		t.Fatalf("the same entry without the mark: %v", err)
	}
	if p := c.Meshes[mesh.Istio].ProxyUID; p == nil || *p != 1337 {
		t.Errorf("unmarked entry: istio proxyUID %v, want the default", p)
	}
}

// The agent refuses what it cannot chain faithfully.
func TestResolveRefuses(t *testing.T) {
	for raw, want := range map[string]string{
		`{"type":"mesh-cni","excludeNamespace":["a"]}`:                       `unsupported key "excludeNamespace"`,
		`{"type":"mesh-cni","resolved":true}`:                                "invalid resolved",
		`{"type":"mesh-cni","backend":"auto","backend":"nftables"}`:          `duplicate key "backend"`,
		`{"type":"mesh-cni","meshes":{"istio":{"proxyUID":1,"proxyUID":2}}}`: `duplicate key "meshes.istio.proxyUID"`,
		`{"type":"bridge"}`:                                      `invalid type "bridge"`,
		`{"type":"mesh-cni"} {}`:                                 "data after",
		`{"type":"mesh-cni","ipv6":"yes"}`:                       "failed to decode",
		`{"type":"mesh-cni","meshes":{"istio":{"proxyUID":-5}}}`: "proxyUID",
	} {
		if _, err := Load([]byte(raw), HostPaths{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error with %q", raw, err, want)
		}
	}
}

// The chart's schema and docs/configuration.md are generated from the
// tables; `go generate ./internal/config` rewrites them.
func TestGeneratedFiles(t *testing.T) {
	root := filepath.Join("..", "..")
	schema, err := os.ReadFile(filepath.Join(root, SchemaFile))
	if err != nil {
		t.Fatal(err)
	}
	want, err := SpliceSchema(schema)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(schema, want) {
		t.Errorf("%s is out of date: run go generate ./internal/config", SchemaFile)
	}
	doc, err := os.ReadFile(filepath.Join(root, DocFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(doc, Doc()) {
		t.Errorf("%s is out of date: run go generate ./internal/config", DocFile)
	}
	if b, err := os.ReadFile(filepath.Join(root, ProfilesFile)); err != nil || !bytes.Equal(b, ProfileDefaults()) {
		t.Errorf("%s is out of date (%v): run go generate ./internal/config", ProfilesFile, err)
	}
	if b, err := os.ReadFile(filepath.Join(root, SharedNamespacesFile)); err != nil || !bytes.Equal(b, SharedNamespacesJSON()) {
		t.Errorf("%s is out of date (%v): run go generate ./internal/config", SharedNamespacesFile, err)
	}
	for _, name := range mesh.Profiles {
		if !bytes.Contains(doc, []byte(" "+name+" |")) || !bytes.Contains(schema, []byte(`"mesh.`+name+`"`)) {
			t.Errorf("profile %s is not in the generated files", name)
		}
	}
}

// The splice keeps every part it does not own and drops owned parts that
// are no longer generated.
func TestSpliceSchemaKeepsTheRest(t *testing.T) {
	in := []byte(`{"title":"x","definitions":{"mine":{"type":"string"},"mesh.gone":{}},` +
		`"properties":{"other":{"$ref":"#/definitions/mine"},"backend":{"type":"integer"}}}`)
	out, err := SpliceSchema(in)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Title       string
		Definitions map[string]json.RawMessage
		Properties  map[string]map[string]any
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if got.Title != "x" || got.Definitions["mine"] == nil || got.Properties["other"] == nil {
		t.Errorf("lost a part it does not own:\n%s", out)
	}
	if got.Definitions["mesh.gone"] != nil || got.Definitions["mesh."+mesh.Istio] == nil {
		t.Errorf("owned definitions not regenerated:\n%s", out)
	}
	if got.Properties["backend"]["enum"] == nil || got.Properties["logLevel"] == nil {
		t.Errorf("owned properties not regenerated:\n%s", out)
	}
	if again, _ := SpliceSchema(out); !bytes.Equal(again, out) {
		t.Error("splicing twice changes the file")
	}
}

// An entry an older agent chained (the chart's entry of before, bytes as
// they were, no mark) still works, and means what the resolved one does.
func TestOlderAgentEntry(t *testing.T) {
	old, err := Parse([]byte(`{"cniVersion":"1.0.0","name":"k8s-pod-network",` + chartEntry[1:]))
	if err != nil {
		t.Fatalf("an older agent's entry: %v", err)
	}
	b, err := Load([]byte(chartEntry), HostPaths{})
	if err != nil {
		t.Fatal(err)
	}
	now, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if old.Resolved || !now.Resolved {
		t.Fatalf("resolved marks: older %v, agent's %v", old.Resolved, now.Resolved)
	}
	o, n := old.Settings, now.Settings
	o.RawMeshes, n.RawMeshes, o.Resolved, n.Resolved = nil, nil, false, false
	if !reflect.DeepEqual(o, n) || !reflect.DeepEqual(old.Meshes, now.Meshes) || !reflect.DeepEqual(old.MeshSet, now.MeshSet) {
		t.Errorf("the older entry means something else:\n%+v %+v\n%+v %+v", o, old.Meshes, n, now.Meshes)
	}
}

// A resolved entry of a later release: keys and a profile this release
// does not know are ignored (docs/upgrade.md, compatibility); a known key
// of the wrong type is still refused. Without the mark the unknown profile
// key is refused, as a typo in a hand-written entry.
func TestResolvedEntryOfALaterRelease(t *testing.T) {
	b, err := Load([]byte(`{"type":"mesh-cni"}`), HostPaths{})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m["laterKey"] = 1
	meshes := m["meshes"].(map[string]any)
	meshes[mesh.Istio].(map[string]any)["laterProfileKey"] = "x"
	meshes["laterMesh"] = map[string]any{"enabled": true}
	later, _ := json.Marshal(m)
	c, err := Parse(later)
	if err != nil {
		t.Fatalf("a later release's resolved entry: %v", err)
	}
	if _, ok := c.Meshes["laterMesh"]; ok || c.Meshes[mesh.Istio].ProxyUID == nil {
		t.Errorf("meshes read as %+v", c.Meshes)
	}
	meshes[mesh.Istio].(map[string]any)["proxyUID"] = "1337"
	mistyped, _ := json.Marshal(m)
	if _, err := Parse(mistyped); err == nil || !strings.Contains(err.Error(), "meshes.istio") {
		t.Errorf("a known key of the wrong type: %v, want it refused", err)
	}
	meshes[mesh.Istio].(map[string]any)["proxyUID"] = 1337
	delete(m, "resolved")
	unmarked, _ := json.Marshal(m)
	if _, err := Parse(unmarked); err == nil || !strings.Contains(err.Error(), "unsupported key") {
		t.Errorf("the same entry unmarked: %v, want the unknown key refused", err)
	}
}
