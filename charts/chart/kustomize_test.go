package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

const kustomizeDir = "../../kustomize"

// The kustomize base and the components' generated resources must be what
// the chart renders today (`make kustomize-base` regenerates them).
func TestKustomizeBaseMatchesChart(t *testing.T) {
	want, err := GenerateKustomize(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := WriteGenerated(kustomizeDir, want); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ReadGenerated(kustomizeDir)
	if err != nil {
		t.Fatal(err)
	}
	for p, b := range want {
		if g, ok := got[p]; !ok {
			t.Errorf("kustomize/%s is missing; run make kustomize-base", p)
		} else if string(g) != string(b) {
			t.Errorf("kustomize/%s drifted from the chart; run make kustomize-base:\n%s", p, testenv.FirstDiff(string(b), string(g)))
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("kustomize/%s is no longer rendered by the chart; run make kustomize-base", p)
		}
	}
}

// Each overlay must build with the pinned kustomize API and give exactly the
// objects the chart renders for that platform preset.
func TestOverlaysMatchPresets(t *testing.T) {
	for _, p := range Platforms {
		t.Run(p, func(t *testing.T) {
			got := build(t, filepath.Join(kustomizeDir, "overlays", p))
			want := renderForKustomize(t, map[string]any{"platform": p})
			compareObjects(t, want, got)
		})
	}
}

// Each component, added to the base, must give what the chart renders with
// the values it stands for.
func TestComponentsMatchValues(t *testing.T) {
	abs, err := filepath.Abs(kustomizeDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		values map[string]any
	}{
		{"repair-off", map[string]any{"repair": map[string]any{"enabled": false}}},
		{"startup-taint", map[string]any{"startupTaint": map[string]any{"enabled": true}}},
		{"gke-quota", map[string]any{"resourceQuota": map[string]any{"enabled": true}}},
		{"metrics-auth", map[string]any{"metrics": map[string]any{"bindAddress": ""}}},
		{"openshift-scc-nad", map[string]any{"platform": "openshift", "cni": map[string]any{
			"binDir": "/opt/cni/bin", "confDir": "/etc/cni/net.d"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			rel := func(p string) string {
				r, err := filepath.Rel(dir, filepath.Join(abs, p))
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - " +
				rel("base") + "\ncomponents:\n  - " + rel(filepath.Join("components", c.name)) + "\n"
			if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
				t.Fatal(err)
			}
			compareObjects(t, renderForKustomize(t, c.values), build(t, dir))
		})
	}
}

// Fields deprecated in kustomize v5 must not be used.
func TestKustomizeNoDeprecatedFields(t *testing.T) {
	deprecated := []string{"vars", "commonLabels", "patchesStrategicMerge", "patchesJson6902", "bases", "imageTags"}
	n := 0
	err := filepath.Walk(kustomizeDir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.Name() != "kustomization.yaml" {
			return err
		}
		n++
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var k map[string]any
		if err := yaml.Unmarshal(b, &k); err != nil {
			t.Errorf("%s: %v", path, err)
			return nil
		}
		for _, d := range deprecated {
			if _, ok := k[d]; ok {
				t.Errorf("%s uses deprecated field %q", path, d)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 1+len(Platforms)+4 {
		t.Errorf("found %d kustomization.yaml files, want base + %d overlays + 4 components", n, len(Platforms))
	}
}

func build(t *testing.T, dir string) map[string]any {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out := map[string]any{}
	for _, r := range m.Resources() {
		b, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var o map[string]any
		if err := json.Unmarshal(b, &o); err != nil {
			t.Fatal(err)
		}
		out[r.GetKind()+"/"+r.GetNamespace()+"/"+r.GetName()] = normalize(o)
	}
	return out
}

// renderForKustomize renders the chart as the kustomize tree is generated:
// fixed release, labelled Namespace, no Helm labels.
func renderForKustomize(t *testing.T, vals map[string]any) map[string]any {
	t.Helper()
	v := BaseValues()
	for k, x := range vals {
		v[k] = x
	}
	r, err := Render(chartDir, Options{Values: v})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Objects(r.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	for _, o := range objs {
		StripHelm(o.Raw)
		ns, _ := o.Raw["metadata"].(map[string]any)["namespace"].(string)
		out[o.Kind+"/"+ns+"/"+o.Name] = normalize(o.Raw)
	}
	return out
}

// normalize round-trips through JSON and drops nulls, so both sides compare
// by value.
func normalize(v any) any {
	b, _ := json.Marshal(v)
	var x any
	_ = json.Unmarshal(b, &x)
	return dropNulls(x)
}

func dropNulls(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if x == nil {
				delete(t, k)
			} else {
				t[k] = dropNulls(x)
			}
		}
	case []any:
		for i, x := range t {
			t[i] = dropNulls(x)
		}
	}
	return v
}

func compareObjects(t *testing.T, want, got map[string]any) {
	t.Helper()
	var ids []string
	for id := range want {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		g, ok := got[id]
		if !ok {
			t.Errorf("%s: rendered by the chart, missing from kustomize", id)
			continue
		}
		if !reflect.DeepEqual(want[id], g) {
			wb, _ := yaml.Marshal(want[id])
			gb, _ := yaml.Marshal(g)
			t.Errorf("%s differs (chart -, kustomize +):\n%s", id, testenv.FirstDiff(string(wb), string(gb)))
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			t.Errorf("%s: in kustomize, not rendered by the chart", id)
		}
	}
	if len(want) == 0 || !strings.Contains(strings.Join(ids, " "), "DaemonSet/") {
		t.Errorf("nothing to compare: %v", ids)
	}
}

// The kustomize README's patch for API servers older than 1.30 builds
// exactly what the chart renders for such a version: the base without the
// own-node admission policy and its binding.
func TestKustomizeReadmeDropsAdmissionPolicy(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(kustomizeDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```yaml\n(patches:\n.*?\\$patch: delete.*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("kustomize/README.md has no patches block with $patch: delete")
	}
	dir := t.TempDir()
	abs, err := filepath.Abs(filepath.Join(kustomizeDir, "base"))
	if err != nil {
		t.Fatal(err)
	}
	base, err := filepath.Rel(dir, abs)
	if err != nil {
		t.Fatal(err)
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - " + base + "\n" + string(m[1])
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	got := build(t, dir)
	v := BaseValues()
	r, err := Render(chartDir, Options{Values: v, KubeVersion: "v1.29.0"})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Objects(r.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{}
	for _, o := range objs {
		StripHelm(o.Raw)
		ns, _ := o.Raw["metadata"].(map[string]any)["namespace"].(string)
		want[o.Kind+"/"+ns+"/"+o.Name] = normalize(o.Raw)
	}
	for key := range got {
		if strings.HasPrefix(key, "ValidatingAdmissionPolicy") {
			t.Errorf("%s survives the README's patch", key)
		}
	}
	if len(got) != len(want) {
		t.Errorf("the README's overlay builds %d objects, the chart for 1.29 renders %d", len(got), len(want))
	}
	for key, o := range want {
		if !reflect.DeepEqual(got[key], o) {
			t.Errorf("%s differs from the chart's render for 1.29", key)
		}
	}
}
