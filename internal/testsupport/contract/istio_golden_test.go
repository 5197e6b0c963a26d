package contract

import (
	"bytes"
	"fmt"
	"os/exec"
	"testing"
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
			t.Errorf("%s: Istio's injector output changed (make istio-goldens to accept): %s", name, firstDiff(w, g))
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s: no golden; run make istio-goldens", name)
		}
	}
}

// firstDiff names the first line where the golden and the new output differ.
func firstDiff(want, got []byte) string {
	w, g := bytes.Split(want, []byte("\n")), bytes.Split(got, []byte("\n"))
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl []byte
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if !bytes.Equal(wl, gl) {
			return fmt.Sprintf("line %d: golden %q, now %q", i+1, wl, gl)
		}
	}
	return "same lines"
}
