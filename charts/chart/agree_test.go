package chart

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/config"
	"github.com/mesh-cni/mesh-cni/internal/mesh"
)

// edgeValues are values on and past the edges of each kind of field.
func edgeValues(f meshField) []any {
	switch k := f.typ.Kind(); {
	case k == reflect.Int || (k == reflect.Pointer && f.typ.Elem().Kind() == reflect.Int64):
		return []any{-2, -1, 0, 1, 65535, 65536, 4294967294, 4294967295}
	case k == reflect.Pointer && f.typ.Elem().Kind() == reflect.Bool:
		return []any{true, false}
	case k == reflect.String:
		return []any{"", "x", "a b", "=x", " =x", "k=", "REDIRECT", "tproxy", strings.Repeat("a", 300)}
	case k == reflect.Slice:
		return []any{[]any{}, []any{"0"}, []any{"65536"}, []any{"2-1"}, []any{"1-65535"}, []any{"http"}, []any{"*"},
			[]any{"10.0.0.0/33"}, []any{"::/0"}, []any{"eth0"}, []any{"a/b"}, []any{"."}, []any{strings.Repeat("e", 16)}}
	}
	return nil
}

// keyEdges are values on and past the edges of each top-level key the
// chart sets.
var keyEdges = map[string][]any{
	"logLevel":          {"loud", "debug", "DEBUG", "Warn", ""},
	"backend":           {"nft", "nftables", "iptables-legacy", "auto", "AUTO", ""},
	"ipv6":              {true, false},
	"excludeNamespaces": {[]any{}, []any{"Kube_System"}, []any{"kube-system"}, []any{strings.Repeat("a", 64)}, []any{"-a"}, []any{""}},
	"lookupTimeout":     {"0s", "1m", "61s", "forever", "500ms", "1h", "5", ""},
}

// agree renders vals and writes the same settings straight into a chain
// entry (as a kustomize user would), and returns the chart's and the
// agent's verdicts (the agent refuses what the plugin refuses). The entry
// the chart rendered must fare with the agent as the hand-written one.
func agree(t *testing.T, vals map[string]any, entry map[string]any) (chartErr, agentErr error) {
	t.Helper()
	r, chartErr := Render(chartDir, Options{Values: vals})
	entry["type"] = "mesh-cni"
	b, _ := json.Marshal(entry)
	_, agentErr = config.Load(b, config.HostPaths{})
	if chartErr == nil {
		objs, err := Objects(r.Manifest)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := path(rendered{objs: objs}.get(t, "ConfigMap", ""), "data", "plugin.json").(string)
		if _, err := config.Load([]byte(raw), config.HostPaths{}); (err == nil) != (agentErr == nil) {
			t.Errorf("the agent judges the chart's entry (%s) unlike the same settings written by hand (%s): %s\n%s",
				verdict(err), verdict(agentErr), toJSON(vals), raw)
		}
	}
	return chartErr, agentErr
}

// The chart and the plugin agree on every key, both ways: a value the chart
// renders, the agent accepts in the chain entry, and a value the chart
// refuses, the agent refuses too (so the schema forbids nothing that
// works). Both come from one table (internal/config): the schema is generated
// from it. The exceptions are the table's documented gaps.
func TestChartAndPluginAgree(t *testing.T) {
	check := func(what string, v any, chartErr, agentErr error, gapOK func() string) {
		t.Helper()
		if (chartErr == nil) == (agentErr == nil) {
			return
		}
		if chartErr == nil && gapOK() != "" {
			return
		}
		t.Errorf("%s=%s: chart %s, agent %s", what, toJSON(v), verdict(chartErr), verdict(agentErr))
	}
	for _, f := range meshFields(t) {
		for _, name := range mesh.Profiles {
			for _, v := range edgeValues(f) {
				for _, on := range []bool{true, false} {
					vals := meshValues(t, name, f.json, v)
					m := path(vals, "meshes", name).(map[string]any)
					if !on && f.json != "enabled" {
						m["enabled"] = false
					}
					chartErr, agentErr := agree(t, vals, map[string]any{"meshes": map[string]any{name: maps.Clone(m)}})
					check(fmt.Sprintf("meshes.%s.%s (enabled %v)", name, f.json, m["enabled"]), v, chartErr, agentErr,
						func() string { return meshGap(t, name, f.json, v) })
				}
			}
		}
	}
	for _, k := range config.Keys {
		if k.Schema == nil || k.Name == "meshes" {
			continue
		}
		edges, ok := keyEdges[k.Name]
		if !ok {
			t.Errorf("no edge values for %s", k.Name)
		}
		for _, v := range append(edges, nil) {
			chartErr, agentErr := agree(t, map[string]any{k.Name: v}, map[string]any{k.Name: v})
			check(k.Name, v, chartErr, agentErr, func() string {
				if k.Name == "lookupTimeout" {
					return k.Gap
				}
				return ""
			})
		}
	}
}

// linkerd2-cni's value names agree too: a value the chart takes under the
// old name, the agent takes under the linkerd key it sets.
func TestChartAndPluginAgreeOnCompatKeys(t *testing.T) {
	d, err := mesh.Defaults(mesh.Linkerd)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range config.CompatKeys {
		for _, v := range []any{-2, -1, 0, 1, 65535, 65536, 4294967294, 4294967295, "1", nil} {
			vals, key, set := map[string]any{c.Name: v}, c.MeshKey, any(v)
			if c.MeshKey == "" { // a port of ignoreInboundPorts: control, admin, then the user's
				if v == nil || v == "1" {
					continue // unset: TestLinkerdCompatPortsDefault; "1": the entry has no number type to refuse it
				}
				vals["ignoreInboundPorts"] = "25"
				ports := []any{d.IgnoreInbound[0], d.IgnoreInbound[1], "25"}
				ports[map[string]int{"proxyControlPort": 0, "proxyAdminPort": 1}[c.Name]] = fmt.Sprint(v)
				key, set = "ignoreInboundPorts", ports
			}
			entry := map[string]any{"meshes": map[string]any{mesh.Linkerd: map[string]any{key: set}}}
			chartErr, agentErr := agree(t, vals, entry)
			if (chartErr == nil) != (agentErr == nil) {
				t.Errorf("%s=%s: chart %s, agent (meshes.linkerd.%s) %s", c.Name, toJSON(v), verdict(chartErr), key, verdict(agentErr))
			}
		}
	}
}

// linkerd2-cni's proxyControlPort and proxyAdminPort, unset, are the
// linkerd profile's ignored inbound ports, listed before the user's.
func TestLinkerdCompatPortsDefault(t *testing.T) {
	d, err := mesh.Defaults(mesh.Linkerd)
	if err != nil {
		t.Fatal(err)
	}
	conf := pluginConf(t, render(t, "", "", map[string]any{"ignoreInboundPorts": "25"}))
	if got, want := conf.Meshes[mesh.Linkerd].IgnoreInbound, append(slices.Clone(d.IgnoreInbound), "25"); !slices.Equal(got, want) {
		t.Errorf("ignoreInboundPorts %v, want %v", got, want)
	}
}

// Every iptablesMode the schema takes maps, in the template, to a backend
// the agent knows (config.Backends).
func TestIptablesModeIsABackend(t *testing.T) {
	var schema struct {
		Properties struct {
			IptablesMode struct {
				Enum []string `json:"enum"`
			} `json:"iptablesMode"`
		} `json:"properties"`
	}
	readSchema(t, &schema)
	modes := schema.Properties.IptablesMode.Enum
	if len(modes) == 0 {
		t.Fatal("the schema lists no iptablesMode")
	}
	for _, m := range modes {
		conf := pluginConf(t, render(t, "", "", map[string]any{"iptablesMode": m}))
		if !slices.Contains(config.Backends, conf.Backend) {
			t.Errorf("iptablesMode %q: backend %q is not one of %v", m, conf.Backend, config.Backends)
		}
	}
}

// Each profile needs, when it is on, the keys it has no default for: the
// chart refuses their absence as the agent does, and neither asks for them
// when the profile is off.
func TestChartAndPluginAgreeOnNeededKeys(t *testing.T) {
	for _, name := range mesh.Profiles {
		full := map[string]any{"sidecar": "proxy", "selectAnnotation": "example.com/mesh", "proxyUID": 4000,
			"inboundPort": 15006, "outboundPort": 15001, "dnsPort": 15053, "captureDNS": true}
		for _, k := range config.MeshKeys {
			if !k.Need && k.NeedWith == "" {
				continue
			}
			for _, enabled := range []any{true, false, nil} {
				m := maps.Clone(full)
				delete(m, k.Name)
				if k.Or != "" {
					delete(m, k.Or)
				}
				if enabled != nil {
					m["enabled"] = enabled
				}
				vals := map[string]any{"meshes": map[string]any{name: m}}
				chartErr, agentErr := agree(t, vals, map[string]any{"meshes": map[string]any{name: maps.Clone(m)}})
				if (chartErr == nil) != (agentErr == nil) {
					t.Errorf("meshes.%s without %s (enabled %v): chart %s, agent %s", name, k.Name, enabled, verdict(chartErr), verdict(agentErr))
				}
				d, _ := mesh.Defaults(name)
				on := enabled == true || (enabled == nil && (*d.Enabled || mesh.OnWhenConfigured(name)))
				if !on && chartErr != nil {
					t.Errorf("meshes.%s off without %s: chart %s", name, k.Name, verdict(chartErr))
				}
			}
		}
	}
}

// meshGap says why the chart may accept a mesh value the agent refuses, or
// "": only what the table lists as out of a schema's reach.
func meshGap(t *testing.T, name, key string, v any) string {
	t.Helper()
	for _, k := range config.MeshKeys {
		if k.Name != key {
			continue
		}
		switch {
		case toJSON(v) == `["2-1"]` && strings.Contains(k.Gap, "range"):
			return k.Gap
		case key == "outboundPort" && strings.Contains(k.Gap, "inboundPort"):
			d, _ := mesh.Defaults(name)
			if n, ok := v.(int); ok && n == d.InboundPort {
				return k.Gap
			}
		}
	}
	return ""
}

func verdict(err error) string {
	if err == nil {
		return "accepts"
	}
	s := err.Error()
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return fmt.Sprintf("refuses (%s)", s)
}
