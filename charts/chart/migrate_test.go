package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/agent/install"
)

// migrateFrom reaches the agent, its schema enum is the agent's list, and
// the modes it cannot work in are refused with the value's name.
func TestMigrateFrom(t *testing.T) {
	for _, from := range install.MigrateSources {
		r := render(t, "rel", "net", map[string]any{"migrateFrom": from})
		if a := args(t, r.get(t, "DaemonSet", "")); a["--migrate-from"] != from {
			t.Errorf("migrateFrom=%s: --migrate-from=%q", from, a["--migrate-from"])
		}
	}
	if a := args(t, render(t, "rel", "net", nil).get(t, "DaemonSet", "")); a["--migrate-from"] != "" {
		t.Errorf("default --migrate-from=%q, want empty", a["--migrate-from"])
	}
	b, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties map[string]struct {
			Enum []string `json:"enum"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	if got, want := schema.Properties["migrateFrom"].Enum, append([]string{""}, install.MigrateSources...); !slices.Equal(got, want) {
		t.Errorf("schema migrateFrom enum %v, the agent takes %v", got, want)
	}
	for _, vals := range []map[string]any{
		{"migrateFrom": "cilium"},
		{"migrateFrom": "istio-cni", "cni": map[string]any{"subdirChaining": true}},
		{"migrateFrom": "linkerd-cni", "cni": map[string]any{"chained": false, "confFileName": "x.conflist"}},
	} {
		if _, err := Render(chartDir, Options{Values: vals}); err == nil || !strings.Contains(err.Error(), "migrateFrom") {
			t.Errorf("%v: %v, want an error naming migrateFrom", vals, err)
		}
	}
}

// handBackTo reaches the agent, its schema enum is the agent's list, and
// it is refused with migrateFrom or without inline chaining.
func TestHandBackTo(t *testing.T) {
	for _, to := range install.MigrateSources {
		r := render(t, "rel", "net", map[string]any{"handBackTo": to})
		if a := args(t, r.get(t, "DaemonSet", "")); a["--hand-back-to"] != to {
			t.Errorf("handBackTo=%s: --hand-back-to=%q", to, a["--hand-back-to"])
		}
	}
	if a := args(t, render(t, "rel", "net", nil).get(t, "DaemonSet", "")); a["--hand-back-to"] != "" {
		t.Errorf("default --hand-back-to=%q, want empty", a["--hand-back-to"])
	}
	b, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties map[string]struct {
			Enum []string `json:"enum"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	if got, want := schema.Properties["handBackTo"].Enum, append([]string{""}, install.MigrateSources...); !slices.Equal(got, want) {
		t.Errorf("schema handBackTo enum %v, the agent takes %v", got, want)
	}
	for _, vals := range []map[string]any{
		{"handBackTo": "cilium"},
		{"handBackTo": "istio-cni", "migrateFrom": "istio-cni"},
		{"handBackTo": "istio-cni", "cni": map[string]any{"subdirChaining": true}},
		{"handBackTo": "linkerd-cni", "cni": map[string]any{"chained": false, "confFileName": "x.conflist"}},
	} {
		if _, err := Render(chartDir, Options{Values: vals}); err == nil || !strings.Contains(err.Error(), "handBackTo") {
			t.Errorf("%v: %v, want an error naming handBackTo", vals, err)
		}
	}
}
