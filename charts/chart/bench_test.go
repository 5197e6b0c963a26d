package chart

import (
	"path/filepath"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Render time of the chart with the Linkerd values (schema check included).
func BenchmarkRender(b *testing.B) {
	vals, err := ReadValues(filepath.Join(chartDir, "ci", "linkerd-values.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Render(chartDir, Options{Values: vals}); err != nil {
			b.Fatal(err)
		}
	}
}

// Build time of the largest overlay (base, a component, a patch).
func BenchmarkKustomizeOpenShift(b *testing.B) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	dir := filepath.Join(kustomizeDir, "overlays", "openshift")
	for b.Loop() {
		if _, err := k.Run(filesys.MakeFsOnDisk(), dir); err != nil {
			b.Fatal(err)
		}
	}
}
