package check

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// OwnNodePolicy checks the API server enforces the chart's
// ValidatingAdmissionPolicy that keeps each agent's writes on its own node.
// Without it RBAC alone lets one agent write every node and, per repair
// policy, every pod: a warning, since mesh-cni still works.
func OwnNodePolicy(ctx context.Context, c *Cluster) Result {
	const name = "agent writes confined to its own node"
	hint := "use Kubernetes 1.30 or newer with ownNodePolicy.enabled=true (charts/mesh-cni/README.md, Security)"
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	sel := metav1.ListOptions{LabelSelector: nameLabel + "=" + appName}
	adm := c.Client.AdmissionregistrationV1()
	pols, err := adm.ValidatingAdmissionPolicies().List(ctx, sel)
	if apierrors.IsNotFound(err) {
		return warn(name, "the API server does not serve admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy: nothing keeps an agent's writes on its own node", hint)
	}
	if err != nil {
		return warn(name, fmt.Sprintf("list ValidatingAdmissionPolicies: %v", err), "run as a user who may list them")
	}
	binds, err := adm.ValidatingAdmissionPolicyBindings().List(ctx, sel)
	if err != nil {
		return warn(name, fmt.Sprintf("list ValidatingAdmissionPolicyBindings: %v", err), "run as a user who may list them")
	}
	bound := map[string]bool{}
	for _, b := range binds.Items {
		bound[b.Spec.PolicyName] = true
	}
	for _, p := range pols.Items {
		if bound[p.Name] {
			return ok(name, "ValidatingAdmissionPolicy "+p.Name)
		}
	}
	return warn(name, "no bound mesh-cni ValidatingAdmissionPolicy: nothing keeps an agent's writes on its own node", hint)
}
