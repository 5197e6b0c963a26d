package testenv

import (
	"os"
	"regexp"
	"testing"
)

// The version the tests look for is the one hack/versions.env pins.
func TestKubernetesVersionPinned(t *testing.T) {
	b, err := os.ReadFile("../../../hack/versions.env")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^K8S_VERSION=(\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("hack/versions.env has no K8S_VERSION")
	}
	if string(m[1]) != KubernetesVersion {
		t.Fatalf("KubernetesVersion is %s, hack/versions.env pins %s", KubernetesVersion, m[1])
	}
}
