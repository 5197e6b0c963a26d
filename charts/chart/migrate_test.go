package chart

import (
	"slices"
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/agent/install"
)

// migrateFrom reaches the agent, its schema enum is the agent's list, and
// the modes it cannot work in are refused with the value's name.
func TestMigrateFrom(t *testing.T) {
	testMigrateSource(t, "migrateFrom", "--migrate-from", []map[string]any{
		{"migrateFrom": "cilium"},
		{"migrateFrom": "istio-cni", "cni": map[string]any{"subdirChaining": true}},
		{"migrateFrom": "linkerd-cni", "cni": map[string]any{"chained": false, "confFileName": "x.conflist"}},
	})
}

// handBackTo reaches the agent, its schema enum is the agent's list, and
// it is refused with migrateFrom or without inline chaining.
func TestHandBackTo(t *testing.T) {
	testMigrateSource(t, "handBackTo", "--hand-back-to", []map[string]any{
		{"handBackTo": "cilium"},
		{"handBackTo": "istio-cni", "migrateFrom": "istio-cni"},
		{"handBackTo": "istio-cni", "cni": map[string]any{"subdirChaining": true}},
		{"handBackTo": "linkerd-cni", "cni": map[string]any{"chained": false, "confFileName": "x.conflist"}},
	})
}

// testMigrateSource: each of the agent's migrate sources set as key reaches
// the agent as flag, the default passes none, the schema's enum is the
// agent's list (and "" for none), and each of refused fails to render with
// an error naming key.
func testMigrateSource(t *testing.T, key, flag string, refused []map[string]any) {
	t.Helper()
	for _, src := range install.MigrateSources {
		r := render(t, "rel", "net", map[string]any{key: src})
		if a := args(t, r.get(t, "DaemonSet", "")); a[flag] != src {
			t.Errorf("%s=%s: %s=%q", key, src, flag, a[flag])
		}
	}
	if a := args(t, render(t, "rel", "net", nil).get(t, "DaemonSet", "")); a[flag] != "" {
		t.Errorf("default %s=%q, want empty", flag, a[flag])
	}
	var schema struct {
		Properties map[string]struct {
			Enum []string `json:"enum"`
		} `json:"properties"`
	}
	readSchema(t, &schema)
	if got, want := schema.Properties[key].Enum, append([]string{""}, install.MigrateSources...); !slices.Equal(got, want) {
		t.Errorf("schema %s enum %v, the agent takes %v", key, got, want)
	}
	for _, vals := range refused {
		if _, err := Render(chartDir, Options{Values: vals}); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%v: %v, want an error naming %s", vals, err, key)
		}
	}
}
