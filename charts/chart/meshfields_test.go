package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"sigs.k8s.io/yaml"

	"github.com/mesh-cni/mesh-cni/internal/config"
	"github.com/mesh-cni/mesh-cni/internal/mesh"
)

// meshField is one field of mesh.Config, by its JSON name.
type meshField struct {
	json string
	typ  reflect.Type
	idx  int
}

// meshFields lists mesh.Config's fields from its json tags, so a field added
// to the plugin without the chart catching up fails the tests below.
func meshFields(t *testing.T) []meshField {
	t.Helper()
	rt := reflect.TypeOf(mesh.Config{})
	var out []meshField
	for i := range rt.NumField() {
		f := rt.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			t.Fatalf("mesh.Config.%s has no json name", f.Name)
		}
		out = append(out, meshField{name, f.Type, i})
	}
	if len(out) < 20 {
		t.Fatalf("found only %d fields in mesh.Config", len(out))
	}
	return out
}

// meshSamples are values a user sets, each unlike every chart and profile
// default. A field missing here gets a value by its type, which the plugin
// may reject: then add one.
var meshSamples = map[string][]any{
	"sidecar":              {"proxy-x"},
	"selectAnnotation":     {"example.com/proxied=yes"},
	"proxyGID":             {4243, -1},
	"portsToRedirect":      {[]any{"31001", "32000-32010"}, []any{"*"}, []any{}},
	"ignoreInboundPorts":   {[]any{"31002", "33000-33010"}, []any{}},
	"ignoreOutboundPorts":  {[]any{"31003"}, []any{}},
	"includeOutboundPorts": {[]any{"31004", "34000-34010"}, []any{}},
	"skipSubnets":          {[]any{"10.1.0.0/16", "fd01::/64", "192.0.2.7"}, []any{}},
	"skipOutboundSubnets":  {[]any{"10.3.0.0/16", "fd03::/64"}, []any{}},
	"includeSubnets":       {[]any{"10.2.0.0/16", "fd02::/64"}, []any{"*"}, []any{}},
	"excludeInterfaces":    {[]any{"eth9", "wg0"}, []any{}},
	"interceptionMode":     {"TPROXY", "REDIRECT"},
}

func samples(f meshField) []any {
	if s, ok := meshSamples[f.json]; ok {
		return s
	}
	switch k := f.typ.Kind(); {
	case k == reflect.Pointer && f.typ.Elem().Kind() == reflect.Bool:
		return []any{true, false}
	case k == reflect.Pointer && f.typ.Elem().Kind() == reflect.Int64:
		return []any{4242}
	case k == reflect.Int:
		return []any{31000}
	case k == reflect.String:
		return []any{"x"}
	case k == reflect.Slice:
		return []any{[]any{"x"}, []any{}}
	}
	return []any{nil}
}

// wrongType is a value of another JSON type than the field's.
func wrongType(f meshField) any {
	switch f.typ.Kind() {
	case reflect.String, reflect.Slice:
		return 7
	}
	return "7"
}

// customBase makes the custom profile valid, so the plugin parses the entry.
var customBase = map[string]any{
	"enabled": true, "selectAnnotation": "example.com/mesh", "proxyUID": 4000,
	"inboundPort": 15006, "outboundPort": 15001, "dnsPort": 15053,
}

// meshValues is a values file (as `helm -f` reads it) that sets one field
// of one mesh.
func meshValues(t *testing.T, name, field string, v any) map[string]any {
	t.Helper()
	m := map[string]any{}
	if name == mesh.Custom {
		for k, x := range customBase {
			m[k] = x
		}
	}
	if name == mesh.Linkerd && field == "captureDNS" {
		m["dnsPort"] = 5353 // linkerd has no DNS port of its own
	}
	m[field] = v
	b, err := yaml.Marshal(map[string]any{"meshes": map[string]any{name: m}})
	if err != nil {
		t.Fatal(err)
	}
	vals, err := chartutil.ReadValues(b)
	if err != nil {
		t.Fatal(err)
	}
	return vals.AsMap()
}

// Every field of mesh.Config can be set through the chart for every mesh,
// and reaches the chain entry under its JSON name with its type: the plugin's
// own parser reads back exactly the value set.
func TestMeshConfigFieldsRoundTrip(t *testing.T) {
	for _, f := range meshFields(t) {
		for _, name := range mesh.Profiles {
			for _, v := range samples(f) {
				t.Run(name+"/"+f.json+"="+toJSON(v), func(t *testing.T) {
					conf := pluginConf(t, render(t, "", "", meshValues(t, name, f.json, v)))
					got := reflect.ValueOf(conf.Meshes[name]).Field(f.idx)
					want := reflect.New(f.typ)
					if err := json.Unmarshal([]byte(toJSON(v)), want.Interface()); err != nil {
						t.Fatal(err)
					}
					if !reflect.DeepEqual(got.Interface(), want.Elem().Interface()) {
						t.Errorf("meshes.%s.%s=%s reaches the plugin as %s", name, f.json, toJSON(v), toJSON(got.Interface()))
					}
				})
			}
		}
	}
}

// entryMeshes is "meshes" of the chart's plugin.json, as rendered.
func entryMeshes(t *testing.T, r rendered) map[string]map[string]any {
	t.Helper()
	raw, _ := path(r.get(t, "ConfigMap", ""), "data", "plugin.json").(string)
	var entry struct {
		Meshes map[string]map[string]any `json:"meshes"`
	}
	if err := json.Unmarshal([]byte(raw), &entry); err != nil {
		t.Fatalf("plugin.json: %v", err)
	}
	return entry.Meshes
}

// null leaves a field out of the chain entry, so the profile's default
// (the agent's, the one owner) applies; the chart holds none of them.
func TestMeshConfigNullIsDefault(t *testing.T) {
	for _, f := range meshFields(t) {
		for _, name := range mesh.Profiles {
			if _, needed := customBase[f.json]; needed && name == mesh.Custom {
				continue // an enabled custom mesh needs it (TestChartAndPluginAgree)
			}
			vals := meshValues(t, name, f.json, nil)
			r := render(t, "", "", vals)
			if v, ok := entryMeshes(t, r)[name][f.json]; ok {
				t.Errorf("meshes.%s.%s=null reaches the chain entry as %s, want it left out", name, f.json, toJSON(v))
			}
			want := reflect.ValueOf(mesh.Config{}.WithDefaults(name)).Field(f.idx)
			if name == mesh.Custom {
				want = reflect.ValueOf(customConfig(t)).Field(f.idx)
			}
			if got := reflect.ValueOf(pluginConf(t, r).Meshes[name]).Field(f.idx); !reflect.DeepEqual(got.Interface(), want.Interface()) {
				t.Errorf("meshes.%s.%s=null: the plugin has %s, want the profile's default %s", name, f.json, toJSON(got.Interface()), toJSON(want.Interface()))
			}
		}
	}
	if m := entryMeshes(t, render(t, "", "", nil)); len(m) != 0 {
		t.Errorf("the default values put meshes in the chain entry: %s", toJSON(m))
	}
	if c := pluginConf(t, render(t, "", "", nil)).Meshes[mesh.Custom]; c.Enabled == nil || *c.Enabled {
		t.Errorf("custom mesh %+v by default, want it off", c)
	}
}

// customConfig is customBase as the plugin resolves it.
func customConfig(t *testing.T) mesh.Config {
	t.Helper()
	b, _ := json.Marshal(customBase)
	var c mesh.Config
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c.WithDefaults(mesh.Custom)
}

// The schema rejects a value of the wrong type for every field, naming it.
func TestMeshConfigFieldsSchemaTypes(t *testing.T) {
	for _, f := range meshFields(t) {
		for _, name := range mesh.Profiles {
			v := wrongType(f)
			_, err := Render(chartDir, Options{Values: meshValues(t, name, f.json, v)})
			if err == nil {
				t.Errorf("meshes.%s.%s=%s rendered; want a schema error", name, f.json, toJSON(v))
			} else if !strings.Contains(err.Error(), f.json) {
				t.Errorf("meshes.%s.%s=%s: error does not name the field:\n%v", name, f.json, toJSON(v), err)
			}
		}
	}
}

// values.yaml restates no plugin default: every plugin setting is null
// (or, for meshes, empty) and points to the generated table of defaults.
// The schema's mesh object has exactly mesh.Config's keys.
func TestValuesRestateNoDefault(t *testing.T) {
	vals, err := ReadValues(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), config.DocFile) {
		t.Errorf("values.yaml does not point to %s", config.DocFile)
	}
	for _, k := range config.Keys {
		if k.Schema == nil {
			continue
		}
		v, ok := vals[k.Name]
		if !ok {
			t.Errorf("values.yaml has no %s", k.Name)
		}
		if m, isMap := v.(map[string]any); v != nil && !(isMap && len(m) == 0) {
			t.Errorf("values.yaml %s = %s restates a default the plugin owns; want null", k.Name, toJSON(v))
		}
	}
	var schema struct {
		Definitions struct {
			Mesh struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"mesh"`
		} `json:"definitions"`
	}
	readSchema(t, &schema)
	var props, fields []string
	for k := range schema.Definitions.Mesh.Properties {
		props = append(props, k)
	}
	for _, f := range meshFields(t) {
		fields = append(fields, f.json)
	}
	slices.Sort(props)
	slices.Sort(fields)
	if !slices.Equal(props, fields) {
		t.Errorf("schema mesh properties %v, want mesh.Config's %v", props, fields)
	}
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
