package chart

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// copyChart copies the chart to a temp dir with another version, as the
// next release of it would be.
func copyChart(t *testing.T, version string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "mesh-cni")
	err := filepath.Walk(chartDir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(chartDir, p)
		if info.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if rel == "Chart.yaml" {
			s := string(b)
			s = chartVersionLine.ReplaceAllString(s, "${1}version: "+strings.TrimPrefix(version, "v"))
			s = chartAppVersionLine.ReplaceAllString(s, "${1}appVersion: "+version)
			b = []byte(s)
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// An upgrade to a later chart version with other values applies over the
// installed objects: the DaemonSet is updated in place (same UID, new
// generation), never refused for its immutable selector.
func TestUpgradeKeepsSelector(t *testing.T) {
	_, c := newAPIClient(t)
	ns := "upgrade"
	c.ensureNamespace(t, ns, "privileged")
	apply := func(dir string, vals map[string]any) *unstructured.Unstructured {
		t.Helper()
		r, err := Render(dir, Options{Namespace: ns, Values: vals})
		if err != nil {
			t.Fatal(err)
		}
		objs, err := Objects(r.Manifest)
		if err != nil {
			t.Fatal(err)
		}
		var ds *unstructured.Unstructured
		for _, o := range objs {
			u := &unstructured.Unstructured{Object: o.Raw}
			gvk := u.GroupVersionKind()
			m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				t.Fatal(err)
			}
			ri := c.dyn.Resource(m.Resource)
			b, _ := json.Marshal(o.Raw)
			force := true
			opts := metav1.PatchOptions{FieldManager: "helm", Force: &force}
			var out *unstructured.Unstructured
			if m.Scope.Name() == "namespace" {
				out, err = ri.Namespace(ns).Patch(context.Background(), u.GetName(), types.ApplyPatchType, b, opts)
			} else {
				out, err = ri.Patch(context.Background(), u.GetName(), types.ApplyPatchType, b, opts)
			}
			if err != nil {
				t.Fatalf("apply %s/%s: %v", o.Kind, o.Name, err)
			}
			if o.Kind == "DaemonSet" {
				ds = out
			}
			c.warn.take()
		}
		return ds
	}
	before := apply(chartDir, nil)
	after := apply(copyChart(t, "v0.2.0"), map[string]any{
		"platform":  "gke",
		"repair":    map[string]any{"policy": "delete"},
		"podLabels": map[string]any{"example.com/new": "label"},
	})
	if before.GetUID() != after.GetUID() {
		t.Error("the DaemonSet was replaced, not updated")
	}
	if after.GetGeneration() <= before.GetGeneration() {
		t.Errorf("generation %d after %d: the upgrade changed nothing", after.GetGeneration(), before.GetGeneration())
	}
	if v := after.GetLabels()["app.kubernetes.io/version"]; v != "v0.2.0" {
		t.Errorf("version label %q after the upgrade", v)
	}
}

// The version lines of Chart.yaml, whatever the release.
var (
	chartVersionLine    = regexp.MustCompile(`(?m)^()version: .*$`)
	chartAppVersionLine = regexp.MustCompile(`(?m)^()appVersion: .*$`)
)
