package install

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// FuzzChain: no input panics the editor, and for every config libcni
// accepts, appending our entry gives a config libcni accepts with our entry
// last, and removing it gives back the exact bytes.
func FuzzChain(f *testing.F) {
	ents, _ := os.ReadDir("testdata/conflists")
	for _, e := range ents {
		if b, err := os.ReadFile(filepath.Join("testdata/conflists", e.Name())); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"name":"a","cniVersion":"1.0.0","plugins":[{"type":"x"}],"plugins":[{"type":"y"}]}`))
	f.Add([]byte(`{"name":"a","plugins":[{"type":"mesh-cni"},{"type":"b\"]}"}]}`))
	entry := []byte(`{"type":"mesh-cni","logLevel":"info","meshes":{"linkerd":{"proxyUID":2102}}}`)
	f.Fuzz(func(t *testing.T, data []byte) {
		appendPlugin(data, entry)
		removePlugins(data, "mesh-cni")
		convertConf(data)
		if _, err := parseConfig("x.conf", data); err == nil {
			list, err := convertConf(data)
			if err != nil {
				t.Fatalf("convert a valid .conf: %v", err)
			}
			if _, err := parseConfig("x.conflist", list); err != nil {
				t.Fatalf("converted .conf does not load: %v\n%s", err, list)
			}
		}
		if _, err := parseConfig("x.conflist", data); err != nil {
			return
		}
		stripped, _, err := removePlugins(data, "mesh-cni")
		if err != nil {
			t.Fatalf("remove from a valid list: %v", err)
		}
		out, err := appendPlugin(stripped, entry)
		if err != nil {
			t.Fatalf("append to a valid list: %v", err)
		}
		if !json.Valid(out) {
			t.Fatalf("result is not JSON:\n%s", out)
		}
		l, err := parseConfig("x.conflist", out)
		if err != nil {
			t.Fatalf("result does not load: %v\n%s", err, out)
		}
		last := l.Plugins[len(l.Plugins)-1]
		if last.Network.Type != "mesh-cni" || !jsonEqual(last.Bytes, entry) {
			t.Fatalf("our entry is not last:\n%s", out)
		}
		back, n, err := removePlugins(out, "mesh-cni")
		if err != nil || n != 1 || !bytes.Equal(back, stripped) {
			t.Fatalf("remove did not restore (n=%d err=%v):\n%s\n---\n%s", n, err, back, stripped)
		}
	})
}
