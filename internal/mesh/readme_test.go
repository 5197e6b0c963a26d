package mesh

import (
	"os"
	"strings"
	"testing"
)

// The README is the user reference: every honoured annotation, label and
// env var must be in it. The settings are in docs/configuration.md,
// generated from the types (internal/config checks it).
func TestReadmeNamesEverything(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	names := append([]string{LinkerdControlPlaneLabel, IstioDNSCaptureEnv, IstioDisableEnvoyEnv, LinkerdInit, IstioInit}, HonouredAnnotations...)
	for _, n := range names {
		if !strings.Contains(doc, "`"+n) {
			t.Errorf("README.md does not document %s", n)
		}
	}
	if !strings.Contains(doc, "docs/configuration.md#mesh-profiles-meshesname") {
		t.Error("README.md does not point to the generated table of profile settings")
	}
}
