package config

//go:generate go run ./gen -root ../..

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/mesh-cni/mesh-cni/internal/mesh"
)

// Files generated from Keys and MeshKeys, relative to the repository root.
const (
	SchemaFile   = "charts/mesh-cni/values.schema.json"
	DocFile      = "docs/configuration.md"
	ProfilesFile = "charts/mesh-cni/files/profiles.json"
)

// ProfileDefaults returns every profile's defaults as JSON, for the chart's
// templates that need one (the `helm test` pod plays a profile's contract)
// without restating it.
func ProfileDefaults() []byte {
	all := map[string]mesh.Config{}
	for _, name := range mesh.Profiles {
		all[name] = mesh.Config{}.WithDefaults(name)
	}
	b, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		panic(err) // plain structs always encode
	}
	return append(b, '\n')
}

// ValuesSchema returns the parts of the chart's values.schema.json that
// Keys, MeshKeys, ChartValues and CompatKeys own: top-level properties
// (the chart values that set a key of the same name, ChartValues and
// CompatKeys) and definitions
// (the mesh objects, one per profile, and what their lists hold).
func ValuesSchema() (props, defs map[string]any) {
	props = map[string]any{}
	for _, k := range Keys {
		if k.Schema == nil {
			continue
		}
		p := maps.Clone(k.Schema)
		p["description"] = plain(k.Doc)
		props[k.Name] = p
	}
	for _, v := range ChartValues {
		p := maps.Clone(v.Schema)
		p["description"] = plain(v.Doc)
		props[v.Name] = p
	}
	for _, c := range CompatKeys {
		props[c.Name] = compatSchema(c)
	}
	defs = map[string]any{"mesh": meshSchema(), "portOrRange": portOrRange, "cidr": cidr}
	for _, name := range mesh.Profiles {
		defs["mesh."+name] = profileSchema(name)
	}
	return props, defs
}

// ownedDef says whether a definition of the schema file is generated.
func ownedDef(name string) bool {
	return name == "mesh" || strings.HasPrefix(name, "mesh.") || name == "portOrRange" || name == "cidr"
}

// SpliceSchema returns the chart's schema file with the parts ValuesSchema
// owns replaced; every other part keeps its place and content.
func SpliceSchema(file []byte) ([]byte, error) {
	root, err := decodeOrdered(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", SchemaFile, err)
	}
	top, ok := root.(object)
	if !ok {
		return nil, fmt.Errorf("%s: not an object", SchemaFile)
	}
	props, defs := ValuesSchema()
	var propOrder []string // new properties go in Keys' order
	for _, k := range Keys {
		if _, ok := props[k.Name]; ok {
			propOrder = append(propOrder, k.Name)
		}
	}
	for _, v := range ChartValues {
		propOrder = append(propOrder, v.Name)
	}
	for _, c := range CompatKeys {
		propOrder = append(propOrder, c.Name)
	}
	for _, part := range []struct {
		name  string
		gen   map[string]any
		order []string
		owned func(string) bool
	}{
		{"properties", props, propOrder, func(k string) bool { _, ok := props[k]; return ok }},
		{"definitions", defs, slices.Sorted(maps.Keys(defs)), ownedDef},
	} {
		i := top.index(part.name)
		if i < 0 {
			return nil, fmt.Errorf("%s has no %s", SchemaFile, part.name)
		}
		o, _ := top[i].val.(object)
		var out object
		done := map[string]bool{}
		for _, m := range o { // in place: replaced, kept, or dropped when owned and no longer generated
			if g, ok := part.gen[m.key]; ok {
				out = append(out, member{m.key, ordered(g)})
				done[m.key] = true
			} else if !part.owned(m.key) {
				out = append(out, m)
			}
		}
		for _, k := range part.order {
			if !done[k] {
				out = append(out, member{k, ordered(part.gen[k])})
			}
		}
		top[i].val = out
	}
	var b bytes.Buffer
	writeIndented(&b, top, "")
	b.WriteByte('\n')
	return b.Bytes(), nil
}

// plain drops Markdown's code marks for a schema description.
func plain(s string) string { return strings.ReplaceAll(s, "`", "") }

// object is a JSON object that keeps its members' order.
type object []member

type member struct {
	key string
	val any
}

// MarshalJSON writes the members in their order.
func (o object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(m.key)
		v, err := json.Marshal(m.val)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func (o object) index(key string) int {
	for i, m := range o {
		if m.key == key {
			return i
		}
	}
	return -1
}

// decodeOrdered decodes JSON into object, []any, json.Number, string,
// bool and nil, keeping the order of object members.
func decodeOrdered(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the top-level value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (any, error) {
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t {
	case json.Delim('{'):
		o := object{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := decodeValue(dec)
			if err != nil {
				return nil, err
			}
			o = append(o, member{k.(string), v})
		}
		_, err := dec.Token()
		return o, err
	case json.Delim('['):
		a := []any{}
		for dec.More() {
			v, err := decodeValue(dec)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := dec.Token()
		return a, err
	}
	return t, nil
}

// ordered turns a generated value (maps, slices, objects) into the
// ordered form; map members are sorted by key.
func ordered(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	o, err := decodeOrdered(b)
	if err != nil {
		panic(err)
	}
	return o
}

// writeIndented writes v as JSON indented by two spaces, one member or
// item a line, without HTML escapes.
func writeIndented(b *bytes.Buffer, v any, indent string) {
	switch v := v.(type) {
	case object:
		if len(v) == 0 {
			b.WriteString("{}")
			return
		}
		b.WriteString("{\n")
		for i, m := range v {
			b.WriteString(indent + "  ")
			writeString(b, m.key)
			b.WriteString(": ")
			writeIndented(b, m.val, indent+"  ")
			if i < len(v)-1 {
				b.WriteByte(',')
			}
			b.WriteByte('\n')
		}
		b.WriteString(indent + "}")
	case []any:
		if len(v) == 0 {
			b.WriteString("[]")
			return
		}
		b.WriteString("[\n")
		for i, x := range v {
			b.WriteString(indent + "  ")
			writeIndented(b, x, indent+"  ")
			if i < len(v)-1 {
				b.WriteByte(',')
			}
			b.WriteByte('\n')
		}
		b.WriteString(indent + "]")
	case string:
		writeString(b, v)
	case json.Number:
		b.WriteString(v.String())
	case bool:
		fmt.Fprint(b, v)
	case nil:
		b.WriteString("null")
	default:
		panic(fmt.Sprintf("unexpected %T in JSON", v))
	}
}

func writeString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	b.Truncate(b.Len() - 1) // Encode's newline
}
