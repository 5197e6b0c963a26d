package contract

import (
	"bytes"
	"os/exec"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// TestIstioGoldens regenerates the injected pods with Istio's own injector
// (hack/istio-goldens.sh, which builds the Istio tools once into the cache:
// `make istio-bins` does that before the tests) and fails on any difference
// from the committed goldens, so a change in Istio's output shows as a diff.
// Run `make istio-goldens` to accept one.
func TestIstioGoldens(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command("bash", "../../../hack/istio-goldens.sh", dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("hack/istio-goldens.sh: %v\n%s", err, stderr.String())
	}
	want := istioGoldens(t, "testdata/istio")
	got := istioGoldens(t, dir)
	for name, w := range want {
		g, ok := got[name]
		switch {
		case !ok:
			t.Errorf("%s: golden without an input in testdata/istio/in", name)
		case !bytes.Equal(g, w):
			t.Errorf("%s: Istio's injector output changed (make istio-goldens to accept; golden -, now +): %s", name, testenv.FirstDiff(string(w), string(g)))
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s: no golden; run make istio-goldens", name)
		}
	}
}
