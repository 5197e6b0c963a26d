package contract

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/mesh-cni/mesh-cni/internal/mesh"
)

func meshes() map[string]mesh.Config {
	return map[string]mesh.Config{mesh.Linkerd: {}, mesh.Istio: {}, mesh.Kuma: {Enabled: ptr(true)},
		mesh.Consul: {Enabled: ptr(true)}, mesh.Custom: {Enabled: ptr(false)}}
}

func ptr[T any](v T) *T { return &v }

// Every fixture pod, whichever mesh's injector wrote it.
func TestFixtures(t *testing.T) {
	files := fixtures(t, "testdata/*/*.yaml")
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var p mesh.APIPod
			if err := yaml.Unmarshal(b, &p); err != nil {
				t.Fatal(err)
			}
			kp, img, err := loadFixture(f)
			if err != nil {
				t.Fatal(err)
			}
			w, err := promised(kp, img)
			if err != nil {
				t.Fatal(err)
			}
			d, err := mesh.Decide(meshes(), p.Pod(), nil)
			var ie *mesh.IdentityError
			switch {
			case w.refused != "":
				if !errors.As(err, &ie) || ie.Container != w.refused {
					t.Fatalf("want container %s refused, got %+v %v", w.refused, d, err)
				}
			case err != nil || !d.Meshed:
				t.Fatalf("fixture is not meshed: %+v %v", d, err)
			}
			if err := Check(meshes(), &p, img); err != nil {
				t.Error(err)
			}
		})
	}
}

// fixtures are the fixture files pattern matches; none is a failure, not
// a test that passes on nothing.
func fixtures(t *testing.T, pattern string) []string {
	t.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures %s: %v", pattern, err)
	}
	return files
}
