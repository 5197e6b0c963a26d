package check

import (
	"context"
	"strings"
	"testing"

	admv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/helmcli"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// Without the chart's policy the check warns; with the policy and binding
// the chart renders (applied to the real API server) it passes.
func TestOwnNodePolicy(t *testing.T) {
	env := testenv.Start(t)
	wantStatus(t, runOne(t, env, OwnNodePolicy, Options{}), Warn)

	r, err := helmcli.Render("../../../charts/mesh-cni", helmcli.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	adm := env.Client.AdmissionregistrationV1()
	var n int
	for _, doc := range strings.Split(r.Manifest, "\n---\n") {
		switch {
		case strings.Contains(doc, "\nkind: ValidatingAdmissionPolicy\n"):
			var p admv1.ValidatingAdmissionPolicy
			if err := yaml.UnmarshalStrict([]byte(doc), &p); err != nil {
				t.Fatal(err)
			}
			_, err = adm.ValidatingAdmissionPolicies().Create(ctx, &p, metav1.CreateOptions{})
		case strings.Contains(doc, "\nkind: ValidatingAdmissionPolicyBinding\n"):
			var b admv1.ValidatingAdmissionPolicyBinding
			if err := yaml.UnmarshalStrict([]byte(doc), &b); err != nil {
				t.Fatal(err)
			}
			_, err = adm.ValidatingAdmissionPolicyBindings().Create(ctx, &b, metav1.CreateOptions{})
		default:
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 2 {
		t.Fatalf("the default render holds %d policy objects, want a policy and its binding", n)
	}
	wantStatus(t, runOne(t, env, OwnNodePolicy, Options{}), OK)
}
