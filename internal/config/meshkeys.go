package config

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/mesh-cni/mesh-cni/internal/mesh"
)

// MeshKey is one key of "meshes.<profile>" (a field of mesh.Config). Its
// default is the profile's (mesh.Defaults), and internal/mesh checks its value
// when the mesh is on; this table says what each key accepts and does, for
// the chart's schema and docs/configuration.md.
type MeshKey struct {
	Name string
	// Type is the JSON schema of the key's type, checked whether the mesh
	// is on or off (the entry is decoded into mesh.Config either way).
	Type map[string]any
	// Value constrains the value when the mesh is on (a mesh that is off
	// is only checked for its name).
	Value map[string]any
	// Need: when the mesh is on, a profile without a default for the key
	// needs it set; with Or, this key or Or. NeedWith: only while the
	// boolean key NeedWith is true.
	Need     bool
	Or       string
	NeedWith string
	// Unset is what no value means, shown where a profile has no default.
	Unset string
	Gap   string // what the schema cannot check
	Doc   string
}

var (
	portSchema = map[string]any{"minimum": 0, "maximum": mesh.MaxPort}
	// portOrRange is one item of a port list: the chart writes numbers as
	// strings.
	portNumber  = map[string]any{"type": "integer", "minimum": 1, "maximum": mesh.MaxPort}
	portOrRange = map[string]any{
		"oneOf": []any{
			portNumber,
			map[string]any{"type": "string", "pattern": "^" + portRE + "(-" + portRE + ")?$"},
		},
		"description": `a port (4190) or an inclusive range ("4000-4100")`,
	}
	cidr = map[string]any{
		"type":        "string",
		"description": "an IPv4 or IPv6 prefix; a bare address is /32 or /128",
		"anyOf": []any{
			map[string]any{"pattern": `^((25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])(/([0-9]|[12][0-9]|3[0-2]))?$`},
			map[string]any{"pattern": `^[0-9a-fA-F:.]*:[0-9a-fA-F:.]*(/([0-9]|[1-9][0-9]|1[01][0-9]|12[0-8]))?$`},
		},
	}
	star = map[string]any{"const": mesh.Wildcard}
)

// modes is what interceptionMode accepts: unset ("" or null: the
// profile's) or one of mesh.Modes.
func modes() []any {
	out := []any{""}
	for _, m := range mesh.Modes {
		out = append(out, string(m))
	}
	return append(out, nil)
}

// portRE is 1 to mesh.MaxPort without leading zeros (a test checks it
// against the bound).
const portRE = `(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})`

func ref(def string) map[string]any { return map[string]any{"$ref": "#/definitions/" + def} }

func list(item any) map[string]any { return map[string]any{"items": item} }

func typ(t string) map[string]any { return map[string]any{"type": []any{t, "null"}} }

// MeshKeys is the table of mesh.Config's keys, in its order.
var MeshKeys = []MeshKey{
	{Name: "enabled", Type: typ("boolean"), Doc: "judge pods for this mesh"},
	{Name: "sidecar", Type: typ("string"), Need: true, Or: "selectAnnotation",
		Doc: "proxy container name (a container, or an init container with `restartPolicy: Always`) that marks a meshed pod"},
	{Name: "selectAnnotation", Type: typ("string"),
		Value: map[string]any{"anyOf": []any{map[string]any{"maxLength": 0}, map[string]any{"pattern": `^[^=]*[^=\s]`}}},
		Doc:   "`key` or `key=value`: the annotation that marks a meshed pod (with `sidecar`, both must match)"},
	{Name: "proxyUID", Type: typ("integer"), Value: map[string]any{"minimum": 0, "maximum": mesh.MaxID}, Need: true,
		Doc: fmt.Sprintf("the proxy's traffic is never redirected (0 to %d)", mesh.MaxID)},
	{Name: "proxyGID", Type: typ("integer"), Value: map[string]any{"maximum": mesh.MaxID}, Unset: "none",
		Doc: "GID exemption as well; a negative value (`-1`) means none"},
	{Name: "inboundPort", Type: typ("integer"), Value: portSchema, Need: true,
		Doc: "inbound connections are redirected here (`0` or null: the profile's)"},
	{Name: "outboundPort", Type: typ("integer"), Value: portSchema, Need: true,
		Gap: "that it differs from inboundPort",
		Doc: "outbound connections are redirected here (`0` or null: the profile's)"},
	{Name: "tunnelPort", Type: typ("integer"), Value: portSchema, Unset: "none",
		Doc: "inbound port never redirected (Istio's HBONE)"},
	{Name: "dnsPort", Type: typ("integer"), Value: portSchema, NeedWith: "captureDNS", Unset: "none",
		Doc: "where captured DNS goes"},
	{Name: "portsToRedirect", Type: typ("array"), Value: list(map[string]any{"anyOf": []any{ref("portOrRange"), star}}), Unset: "all",
		Gap: "the order of a range's two ends", Doc: "inbound ports to redirect; `[\"*\"]` = all, `[]` = none"},
	{Name: "ignoreInboundPorts", Type: typ("array"), Value: list(ref("portOrRange")), Unset: "none",
		Gap: "the order of a range's two ends", Doc: "inbound ports never redirected"},
	{Name: "ignoreOutboundPorts", Type: typ("array"), Value: list(ref("portOrRange")), Unset: "none",
		Gap: "the order of a range's two ends", Doc: "outbound ports never redirected (istio: TCP and UDP, returned before DNS capture, as Istio's excludeOutboundPorts)"},
	{Name: "includeOutboundPorts", Type: typ("array"), Value: list(ref("portOrRange")), Unset: "none",
		Gap: "the order of a range's two ends", Doc: "with `includeSubnets`: also redirect these ports to any destination"},
	{Name: "skipSubnets", Type: typ("array"), Value: list(ref("cidr")), Unset: "none",
		Gap: "every malformed IPv6 prefix", Doc: "inbound connections from these CIDRs are never redirected (Linkerd's `skip-subnets`: by source only; outbound traffic to them still goes to the proxy)"},
	{Name: "skipOutboundSubnets", Type: typ("array"), Value: list(ref("cidr")), Unset: "none",
		Gap: "every malformed IPv6 prefix", Doc: "outbound connections to these CIDRs are never redirected (bypass the proxy); a pod's own outbound exclusion annotation (Istio, Kuma, Consul) replaces the list"},
	{Name: "includeSubnets", Type: typ("array"), Value: list(map[string]any{"anyOf": []any{ref("cidr"), star}}), Unset: "all",
		Gap: "every malformed IPv6 prefix", Doc: "redirect outbound only to these CIDRs; `[\"*\"]` = all, `[]` = none"},
	{Name: "excludeInterfaces", Type: typ("array"), Value: list(map[string]any{
		"type": "string", "pattern": fmt.Sprintf(`^[!#-+\-.0-9;-~]{1,%d}$`, mesh.MaxIfname), "not": map[string]any{"enum": []any{".", ".."}},
		"description": "an interface name",
	}), Unset: "none", Doc: "traffic in or out of these interfaces is never redirected"},
	{Name: "interceptionMode", Type: typ("string"), Value: map[string]any{"enum": modes()},
		Doc: "`REDIRECT` (nat) or `TPROXY` (mangle, keeps the original source)"},
	{Name: "captureDNS", Type: typ("boolean"),
		Doc: "send TCP and UDP port 53 from non-proxy processes to `dnsPort`"},
	{Name: "proxyLoopbackToInbound", Type: typ("boolean"),
		Doc: "the proxy's own connections to a local, non-loopback address (a Service that resolved to this pod) go to `inboundPort`, except to its `ignoreOutboundPorts` and `tunnelPort` (and TCP 53 when DNS is captured); the inbound port rules do not apply to them, as in Istio and Kuma"},
	{Name: "trustAnnotations", Type: typ("boolean"),
		Doc: "annotations alone may mark a pod meshed; when false, the pod spec confirms it (one lookup, from the agent's cache)"},
}

// meshField returns the field of c whose JSON name is key.
func meshField(c *mesh.Config, key string) reflect.Value {
	v := reflect.ValueOf(c).Elem()
	for i := range v.NumField() {
		if name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ","); name == key {
			return v.Field(i)
		}
	}
	panic(fmt.Sprintf("mesh.Config has no field %q", key))
}

// unset says whether a field holds no value (the zero value: nil, 0, "").
func unset(v reflect.Value) bool { return v.IsZero() }

// profileDefault is profile name's default for key, or nil when unset.
func profileDefault(name, key string) any {
	d, err := mesh.Defaults(name)
	if err != nil {
		panic(err)
	}
	f := meshField(&d, key)
	if unset(f) {
		return nil
	}
	if f.Kind() == reflect.Pointer {
		return f.Elem().Interface()
	}
	return f.Interface()
}

// meshSchema is what every profile accepts: the keys and their types.
func meshSchema() map[string]any {
	var props object // in MeshKeys' order
	for _, k := range MeshKeys {
		p := map[string]any{"description": plain(k.Doc)}
		for n, v := range k.Type {
			p[n] = v
		}
		props = append(props, member{k.Name, p})
	}
	return map[string]any{"type": "object", "additionalProperties": false, "properties": props}
}

// profileSchema is what profile name accepts when it is on: each key's
// value, and the keys it needs that it has no default for.
func profileSchema(name string) map[string]any {
	props := map[string]any{}
	var all []any
	for _, k := range MeshKeys {
		if k.Value != nil {
			props[k.Name] = k.Value
		}
		if k.Need && profileDefault(name, k.Name) == nil {
			need := required(k.Name)
			if k.Or != "" {
				if profileDefault(name, k.Or) != nil {
					continue
				}
				need = map[string]any{"anyOf": []any{need, required(k.Or)}}
			}
			all = append(all, need)
		}
		if k.NeedWith != "" && profileDefault(name, k.Name) == nil {
			all = append(all, map[string]any{"if": isOn(k.NeedWith, profileDefault(name, k.NeedWith) == true), "then": required(k.Name)})
		}
	}
	on := map[string]any{"properties": props}
	if len(all) > 0 {
		on["allOf"] = all
	}
	s := map[string]any{"allOf": []any{ref("mesh")}}
	defOn := profileDefault(name, "enabled") == true || mesh.OnWhenConfigured(name)
	s["if"] = isOn("enabled", defOn)
	s["then"] = on
	return s
}

// isOn is the schema of "boolean key is true", where def is its value
// when unset (absent or null).
func isOn(key string, def bool) map[string]any {
	if def {
		return map[string]any{"not": map[string]any{"required": []any{key}, "properties": map[string]any{key: map[string]any{"const": false}}}}
	}
	return map[string]any{"required": []any{key}, "properties": map[string]any{key: map[string]any{"const": true}}}
}

// required is the schema of "key is set": present, not null, and not the
// value that means unset ("", or 0 for a port).
func required(key string) map[string]any {
	k := meshKey(key)
	t := k.Type["type"].([]any)[0]
	v := map[string]any{"type": t}
	switch {
	case t == "string":
		v["minLength"] = 1
	case t == "integer" && k.Value["maximum"] == mesh.MaxPort:
		v["minimum"] = 1
	}
	return map[string]any{"required": []any{key}, "properties": map[string]any{key: v}}
}

func meshKey(name string) MeshKey {
	for _, k := range MeshKeys {
		if k.Name == name {
			return k
		}
	}
	panic(fmt.Sprintf("no mesh key %q", name))
}

// meshesSchema is the schema of "meshes": one object per known profile.
func meshesSchema() map[string]any {
	props := map[string]any{}
	for _, name := range mesh.Profiles {
		props[name] = ref("mesh." + name)
	}
	return map[string]any{"type": "object", "additionalProperties": false, "properties": props}
}
