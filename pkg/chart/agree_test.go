package chart

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/pkg/config"
	"github.com/mesh-cni/mesh-cni/pkg/mesh"
)

// edgeValues are values on and past the edges of each kind of field.
func edgeValues(f meshField) []any {
	switch k := f.typ.Kind(); {
	case k == reflect.Int || (k == reflect.Pointer && f.typ.Elem().Kind() == reflect.Int64):
		return []any{-2, -1, 0, 1, 65535, 65536, 4294967294, 4294967295}
	case k == reflect.String:
		return []any{"", "x", "a b", "REDIRECT", "tproxy", strings.Repeat("a", 300)}
	case k == reflect.Slice:
		return []any{[]any{"0"}, []any{"65536"}, []any{"2-1"}, []any{"1-65535"}, []any{"http"}, []any{"*"},
			[]any{"10.0.0.0/33"}, []any{"::/0"}, []any{"eth0"}, []any{"a/b"}, []any{strings.Repeat("e", 16)}}
	}
	return nil
}

// The chart and the plugin agree on every mesh field's edges, both ways: a
// value the chart renders, the plugin accepts in the chain entry, and a
// value the chart refuses, the plugin refuses too (so the schema does not
// forbid what works). The plugin's side is the same values written straight
// into an entry, as a kustomize user would.
func TestChartAndPluginAgree(t *testing.T) {
	for _, f := range meshFields(t) {
		for _, name := range mesh.Profiles {
			for _, v := range edgeValues(f) {
				vals := meshValues(t, name, f.json, v)
				_, chartErr := Render(chartDir, Options{Values: vals})
				m := path(vals, "meshes", name)
				entry, _ := json.Marshal(map[string]any{"type": "mesh-cni", "cniVersion": "1.0.0", "name": "n",
					"meshes": map[string]any{name: m}})
				_, pluginErr := config.Parse(entry)
				if (chartErr == nil) != (pluginErr == nil) && gap(name+"."+f.json, v, chartErr == nil) == "" {
					t.Errorf("meshes.%s.%s=%s: chart %s, plugin %s", name, f.json, toJSON(v), verdict(chartErr), verdict(pluginErr))
				}
			}
		}
	}
	for _, c := range []struct {
		key string
		v   any
	}{
		{"backend", "nft"}, {"backend", "nftables"}, {"backend", "iptables-legacy"},
		{"logLevel", "loud"}, {"logLevel", "debug"},
		{"lookupTimeout", "0s"}, {"lookupTimeout", "1m"}, {"lookupTimeout", "61s"}, {"lookupTimeout", "forever"}, {"lookupTimeout", "500ms"},
		{"excludeNamespaces", []any{"Kube_System"}}, {"excludeNamespaces", []any{"kube-system"}}, {"excludeNamespaces", []any{strings.Repeat("a", 64)}},
	} {
		_, chartErr := Render(chartDir, Options{Values: map[string]any{c.key: c.v}})
		entry, _ := json.Marshal(map[string]any{"type": "mesh-cni", "cniVersion": "1.0.0", "name": "n", c.key: c.v})
		_, pluginErr := config.Parse(entry)
		if (chartErr == nil) != (pluginErr == nil) && gap(c.key, c.v, chartErr == nil) == "" {
			t.Errorf("%s=%s: chart %s, plugin %s", c.key, toJSON(c.v), verdict(chartErr), verdict(pluginErr))
		}
	}
}

// gap says why the chart and the plugin may disagree on a value, or "".
// These are the only exceptions; each is either out of a JSON schema's reach
// (the agent refuses such an entry before it is chained, see
// installer/README.md "Refusing a config") or stricter on the chart's side.
func gap(key string, v any, chartAccepts bool) string {
	field := key[strings.LastIndex(key, ".")+1:]
	switch {
	case chartAccepts && toJSON(v) == `["2-1"]`:
		return "a pattern cannot order the two ends of a port range"
	case chartAccepts && key == "custom.selectAnnotation" && v == "":
		return "custom needs sidecar or selectAnnotation: a rule across fields"
	case chartAccepts && key == "lookupTimeout":
		return "a duration's size is not a pattern"
	case !chartAccepts && v == 0 && strings.HasSuffix(field, "Port"):
		return "the plugin reads 0 as unset; the chart spells unset null"
	case !chartAccepts && v == -2 && field == "proxyGID":
		return "the plugin reads any negative GID as no exemption; the chart documents -1"
	}
	return ""
}

func verdict(err error) string {
	if err == nil {
		return "accepts"
	}
	s := err.Error()
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return fmt.Sprintf("refuses (%s)", s)
}
