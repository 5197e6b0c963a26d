package metrics

import (
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/version"
)

// The registry /metrics serves carries mesh_cni_build_info{version,commit} 1
// with the stamped version and commit.
func TestBuildInfo(t *testing.T) {
	mfs, err := Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "mesh_cni_build_info" {
			continue
		}
		if len(mf.Metric) != 1 {
			t.Fatalf("mesh_cni_build_info has %d series, want 1", len(mf.Metric))
		}
		m := mf.Metric[0]
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		want := map[string]string{"version": version.Version, "commit": version.GetCommit()}
		for k, v := range want {
			if labels[k] != v {
				t.Errorf("label %s = %q, want %q", k, labels[k], v)
			}
		}
		if got := m.GetGauge().GetValue(); got != 1 {
			t.Errorf("value %v, want 1", got)
		}
		return
	}
	t.Fatal("mesh_cni_build_info is not registered")
}
