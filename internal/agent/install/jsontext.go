package install

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// The primary's config is edited as text, not re-marshalled: key order,
// whitespace, number spelling and unknown fields stay exactly as its writer
// left them, and removing what we inserted gives back the original bytes.

type span struct{ start, end int }

type member struct {
	key   string
	value span
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// scanValue returns the end offset of the JSON value that starts at b[i].
// The document must already be known to be valid JSON.
func scanValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, fmt.Errorf("unexpected end of JSON at offset %d", i)
	}
	switch b[i] {
	case '"':
		for j := i + 1; j < len(b); j++ {
			switch b[j] {
			case '\\':
				j++
			case '"':
				return j + 1, nil
			}
		}
		return 0, fmt.Errorf("unterminated string at offset %d", i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, err := scanValue(b, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, fmt.Errorf("unterminated container at offset %d", i)
	default:
		j := i
		for j < len(b) && !isSpace(b[j]) && b[j] != ',' && b[j] != '}' && b[j] != ']' {
			j++
		}
		return j, nil
	}
}

// objectMembers lists the members of the object at s, in document order.
func objectMembers(b []byte, s span) ([]member, error) {
	if b[s.start] != '{' {
		return nil, fmt.Errorf("not a JSON object")
	}
	var out []member
	i := skipSpace(b, s.start+1)
	for i < s.end-1 {
		kend, err := scanValue(b, i)
		if err != nil {
			return nil, err
		}
		var key string
		if err := json.Unmarshal(b[i:kend], &key); err != nil {
			return nil, fmt.Errorf("object key at offset %d: %w", i, err)
		}
		i = skipSpace(b, kend)
		if i >= len(b) || b[i] != ':' {
			return nil, fmt.Errorf("missing ':' at offset %d", i)
		}
		i = skipSpace(b, i+1)
		vend, err := scanValue(b, i)
		if err != nil {
			return nil, err
		}
		out = append(out, member{key: key, value: span{i, vend}})
		i = skipSpace(b, vend)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	return out, nil
}

// arrayElements lists the element spans of the array at s.
func arrayElements(b []byte, s span) ([]span, error) {
	if b[s.start] != '[' {
		return nil, fmt.Errorf("not a JSON array")
	}
	var out []span
	i := skipSpace(b, s.start+1)
	for i < s.end-1 {
		end, err := scanValue(b, i)
		if err != nil {
			return nil, err
		}
		out = append(out, span{i, end})
		i = skipSpace(b, end)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	return out, nil
}

// rootObject returns the span of the document's top-level object.
func rootObject(b []byte) (span, error) {
	if !json.Valid(b) {
		var v any
		err := json.Unmarshal(b, &v)
		return span{}, fmt.Errorf("not valid JSON: %w", err)
	}
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return span{}, fmt.Errorf("not a JSON object")
	}
	end, err := scanValue(b, i)
	if err != nil {
		return span{}, err
	}
	return span{i, end}, nil
}

// findMember returns the last member named key: encoding/json (and so
// libcni) lets a later duplicate win, and we must edit what it reads.
func findMember(ms []member, key string) (member, bool) {
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].key == key {
			return ms[i], true
		}
	}
	return member{}, false
}

// pluginsArray returns the document's "plugins" array and its elements.
func pluginsArray(doc []byte) (span, []span, error) {
	root, err := rootObject(doc)
	if err != nil {
		return span{}, nil, err
	}
	ms, err := objectMembers(doc, root)
	if err != nil {
		return span{}, nil, err
	}
	p, ok := findMember(ms, "plugins")
	if !ok {
		return span{}, nil, fmt.Errorf("no \"plugins\" list")
	}
	if doc[p.value.start] != '[' {
		return span{}, nil, fmt.Errorf("\"plugins\" is not a list")
	}
	els, err := arrayElements(doc, p.value)
	return p.value, els, err
}

func pluginType(raw []byte) string {
	var t struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(raw, &t) != nil {
		return ""
	}
	return t.Type
}

// indentBefore returns the indentation of the line el starts on, and
// whether elements sit on their own lines.
func indentBefore(doc []byte, el span) (string, bool) {
	lineStart := bytes.LastIndexByte(doc[:el.start], '\n')
	if lineStart < 0 {
		return "", false
	}
	ws := doc[lineStart+1 : el.start]
	for _, c := range ws {
		if c != ' ' && c != '\t' {
			return "", false
		}
	}
	return string(ws), true
}

// appendPlugin appends entry (compact JSON) as the last element of the
// plugins list, in the style of the element before it. The inserted text
// is exactly doc[lastElementEnd:...] so removePlugins restores the input.
func appendPlugin(doc, entry []byte) ([]byte, error) {
	arr, els, err := pluginsArray(doc)
	if err != nil {
		return nil, err
	}
	var text bytes.Buffer
	at := arr.start + 1
	if len(els) > 0 {
		last := els[len(els)-1]
		at = last.end
		indent, multiline := indentBefore(doc, last)
		text.WriteString(",")
		if multiline {
			unit := "  "
			if len(indent) > 0 && indent[0] == '\t' {
				unit = "\t"
			}
			text.WriteString("\n" + indent)
			if err := json.Indent(&text, entry, indent, unit); err != nil {
				return nil, err
			}
		} else {
			text.WriteString(" ")
			text.Write(entry)
		}
	} else {
		text.Write(entry)
	}
	out := make([]byte, 0, len(doc)+text.Len())
	out = append(out, doc[:at]...)
	out = append(out, text.Bytes()...)
	out = append(out, doc[at:]...)
	return out, nil
}

// removePlugins removes every element of the plugins list whose type is
// typ, with the separator that joins it to the element before it.
func removePlugins(doc []byte, typ string) ([]byte, int, error) {
	removed := 0
	for {
		_, els, err := pluginsArray(doc)
		if err != nil {
			return nil, removed, err
		}
		k := -1
		for i, el := range els {
			if pluginType(doc[el.start:el.end]) == typ {
				k = i
				break
			}
		}
		if k < 0 {
			return doc, removed, nil
		}
		var cut span
		switch {
		case k > 0:
			cut = span{els[k-1].end, els[k].end}
		case len(els) > 1:
			cut = span{els[0].start, els[1].start}
		default:
			cut = els[0]
		}
		out := make([]byte, 0, len(doc))
		out = append(out, doc[:cut.start]...)
		doc = append(out, doc[cut.end:]...)
		removed++
	}
}

// pluginTypes lists the types in the plugins list, in order.
func pluginTypes(doc []byte) ([]string, error) {
	_, els, err := pluginsArray(doc)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(els))
	for i, el := range els {
		out[i] = pluginType(doc[el.start:el.end])
	}
	return out, nil
}

// pluginsOfType returns the raw elements of the given type.
func pluginsOfType(doc []byte, typ string) ([][]byte, error) {
	_, els, err := pluginsArray(doc)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for _, el := range els {
		if raw := doc[el.start:el.end]; pluginType(raw) == typ {
			out = append(out, raw)
		}
	}
	return out, nil
}
