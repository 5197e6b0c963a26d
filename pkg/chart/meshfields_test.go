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

	"github.com/mesh-cni/mesh-cni/pkg/mesh"
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

// null leaves a field out of the chain entry, so the profile's default
// applies. The custom profile stays off unless enabled is true.
func TestMeshConfigNullIsDefault(t *testing.T) {
	for _, f := range meshFields(t) {
		for _, name := range []string{mesh.Linkerd, mesh.Istio} {
			conf := pluginConf(t, render(t, "", "", meshValues(t, name, f.json, nil)))
			if got := reflect.ValueOf(conf.Meshes[name]).Field(f.idx); !got.IsZero() {
				t.Errorf("meshes.%s.%s=null reaches the plugin as %s, want it left out", name, f.json, toJSON(got.Interface()))
			}
		}
	}
	vals := map[string]any{"meshes": map[string]any{"custom": map[string]any{"enabled": nil}}}
	if c := pluginConf(t, render(t, "", "", vals)).Meshes[mesh.Custom]; c.Enabled == nil || *c.Enabled {
		t.Errorf("meshes.custom.enabled=null: custom mesh %+v, want it off", c)
	}
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

// values.yaml lists every field under every mesh and explains each in the
// comment above "meshes:"; the schema's mesh object has exactly these keys.
func TestMeshConfigFieldsDocumented(t *testing.T) {
	vals, err := ReadValues(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	head, _, ok := strings.Cut(string(b), "\nmeshes:\n")
	if !ok {
		t.Fatal("values.yaml has no meshes")
	}
	var fields []string
	for _, f := range meshFields(t) {
		fields = append(fields, f.json)
		if !strings.Contains(head, "\n#   "+f.json+" ") {
			t.Errorf("values.yaml does not explain %s in the comment above meshes", f.json)
		}
		for _, name := range mesh.Profiles {
			m, _ := path(vals, "meshes", name).(map[string]any)
			if _, ok := m[f.json]; !ok {
				t.Errorf("values.yaml meshes.%s has no %s", name, f.json)
			}
		}
	}
	for _, name := range mesh.Profiles {
		m, _ := path(vals, "meshes", name).(map[string]any)
		for k := range m {
			if !slices.Contains(fields, k) {
				t.Errorf("values.yaml meshes.%s.%s is not a field of mesh.Config", name, k)
			}
		}
	}
	sb, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Definitions struct {
			Mesh struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"mesh"`
		} `json:"definitions"`
	}
	if err := json.Unmarshal(sb, &schema); err != nil {
		t.Fatal(err)
	}
	var props []string
	for k := range schema.Definitions.Mesh.Properties {
		props = append(props, k)
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
