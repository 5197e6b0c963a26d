package check

import (
	"context"
	"fmt"
	"sort"
	"strings"

	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const apiReachableName = "API server reachable"

// APIReachable asks the server for its version.
func APIReachable(ctx context.Context, c *Cluster) Result {
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	v, err := c.Client.Discovery().ServerVersion()
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		return fail(apiReachableName, err.Error(),
			"check the kubeconfig and context (--kubeconfig, $KUBECONFIG, kubectl config current-context) and that the API server is up")
	}
	return ok(apiReachableName, "Kubernetes "+v.GitVersion)
}

// CanCreate checks with a SelfSubjectAccessReview that the current user may
// create one kind of object the chart installs.
func CanCreate(group, resource, kind string, namespaced bool) Func {
	return func(ctx context.Context, c *Cluster) Result {
		ns := ""
		where := "cluster-wide"
		if namespaced {
			ns = c.Opts.Namespace
			where = "in namespace " + ns
		}
		name := "can create " + kind + " " + where
		ctx, cancel := c.timeout(ctx)
		defer cancel()
		rev := &authv1.SelfSubjectAccessReview{Spec: authv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: group, Resource: resource},
		}}
		got, err := c.Client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, rev, metav1.CreateOptions{})
		if err != nil {
			return fail(name, "access review failed: "+err.Error(), "the current user must be able to create selfsubjectaccessreviews (every authenticated user can by default)")
		}
		if !got.Status.Allowed {
			msg := "not allowed"
			if got.Status.Reason != "" {
				msg += ": " + got.Status.Reason
			}
			return fail(name, msg, fmt.Sprintf("install as a user who may create %s %s (usually cluster-admin)", kind, where))
		}
		return ok(name, "")
	}
}

// PSA labels and the level the agent needs for its hostPath volumes and
// added capabilities.
const (
	psaEnforceLabel = "pod-security.kubernetes.io/enforce"
	psaPrivileged   = "privileged"
)

// NamespaceAllowsHostPath checks the target namespace's Pod Security level.
func NamespaceAllowsHostPath(ctx context.Context, c *Cluster) Result {
	ns := c.Opts.Namespace
	name := "namespace " + ns + " allows hostPath (Pod Security privileged)"
	fix := fmt.Sprintf("kubectl label --overwrite namespace %s %s=%s", ns, psaEnforceLabel, psaPrivileged)
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	got, err := c.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fail(name, "namespace does not exist",
			fmt.Sprintf("create it labelled for the agent: kubectl create namespace %s && %s", ns, fix))
	}
	if err != nil {
		return fail(name, "cannot read the namespace: "+err.Error(), "run as a user who may get namespaces")
	}
	level, set := got.Labels[psaEnforceLabel]
	switch {
	case level == psaPrivileged:
		return ok(name, "")
	case !set:
		return fail(name, "no "+psaEnforceLabel+" label; the cluster default level applies",
			"the agent mounts host paths, which only the privileged level admits: "+fix)
	default:
		return fail(name, psaEnforceLabel+"="+level+" rejects the agent's hostPath volumes", fix)
	}
}

// Supported node platforms: the image is built for these.
var supportedArch = map[string]bool{"amd64": true, "arm64": true}

func nodeOSArch(n *corev1.Node) (string, string) {
	os, arch := n.Status.NodeInfo.OperatingSystem, n.Status.NodeInfo.Architecture
	if os == "" {
		os = n.Labels[corev1.LabelOSStable]
	}
	if arch == "" {
		arch = n.Labels[corev1.LabelArchStable]
	}
	return os, arch
}

// NodesSupported checks every node's OS and architecture.
func NodesSupported(ctx context.Context, c *Cluster) Result {
	const name = "nodes run a supported OS/arch (linux/amd64, linux/arm64)"
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return fail(name, err.Error(), "run as a user who may list nodes")
	}
	if len(nodes) == 0 {
		return fail(name, "the cluster has no nodes", "join nodes before installing")
	}
	var bad, other []string
	for i := range nodes {
		os, arch := nodeOSArch(&nodes[i])
		switch {
		case os != "linux":
			other = append(other, fmt.Sprintf("node %s: %s/%s", nodes[i].Name, os, arch))
		case !supportedArch[arch]:
			bad = append(bad, fmt.Sprintf("node %s: %s/%s", nodes[i].Name, os, arch))
		}
	}
	if len(bad) > 0 {
		return fail(name, fmt.Sprintf("%d node(s) with an unsupported architecture", len(bad)),
			"keep the agent off them with --set nodeSelector or affinity; meshed pods must not run there", bad...)
	}
	if len(other) > 0 {
		return warn(name, fmt.Sprintf("%d node(s) are not Linux; the agent does not run there", len(other)),
			"pods on these nodes are never meshed by mesh-cni; keep meshed workloads on Linux nodes", other...)
	}
	return ok(name, fmt.Sprintf("%d node(s)", len(nodes)))
}

func condition(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// PrimaryCNIPresent checks each node has a working primary CNI: the agent
// found its config, or the kubelet reports the network ready.
func PrimaryCNIPresent(ctx context.Context, c *Cluster) Result {
	const name = "a primary CNI is ready on every node"
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return fail(name, err.Error(), "run as a user who may list nodes")
	}
	var bad []string
	linux := 0
	for i := range nodes {
		n := &nodes[i]
		if os, _ := nodeOSArch(n); os != "linux" {
			continue
		}
		linux++
		if st, err := agentStatus(n); err == nil && st != nil && st.Conf != "" {
			continue
		}
		if nu := condition(n, corev1.NodeNetworkUnavailable); nu != nil && nu.Status == corev1.ConditionTrue {
			bad = append(bad, fmt.Sprintf("node %s: NetworkUnavailable: %s", n.Name, nu.Message))
			continue
		}
		r := condition(n, corev1.NodeReady)
		if r == nil || r.Status != corev1.ConditionTrue {
			msg := "no Ready condition"
			if r != nil {
				msg = fmt.Sprintf("Ready=%s: %s", r.Status, r.Message)
			}
			bad = append(bad, fmt.Sprintf("node %s: %s", n.Name, msg))
		}
	}
	if len(bad) > 0 {
		return fail(name, fmt.Sprintf("%d node(s) without a working pod network", len(bad)),
			"mesh-cni chains onto the cluster's primary CNI: install that first and wait for the nodes to be Ready (docs/install.md)", bad...)
	}
	return ok(name, fmt.Sprintf("%d Linux node(s)", linux))
}

// MultusMode checks for Multus (and OpenShift, whose primary CNI is Multus):
// there mesh-cni cannot chain into the primary config and must run
// non-chained, attached through a NetworkAttachmentDefinition.
func MultusMode(ctx context.Context, c *Cluster) Result {
	const name = "Multus/OpenShift matches the install mode"
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	var found []string
	if _, err := c.Client.CoreV1().Namespaces().Get(ctx, "openshift-multus", metav1.GetOptions{}); err == nil {
		found = append(found, "namespace openshift-multus (OpenShift)")
	} else if !apierrors.IsNotFound(err) {
		return warn(name, "cannot read namespaces: "+err.Error(), "run as a user who may get namespaces")
	}
	dss, err := c.Client.AppsV1().DaemonSets("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		return warn(name, "cannot list DaemonSets in kube-system: "+err.Error(), "run as a user who may list daemonsets in kube-system")
	}
	for _, ds := range dss.Items {
		if strings.Contains(ds.Name, "multus") {
			found = append(found, "DaemonSet kube-system/"+ds.Name)
		}
	}
	sort.Strings(found)
	switch {
	case len(found) == 0:
		return ok(name, "Multus not found; chained mode")
	case !c.Opts.Chained:
		return ok(name, "Multus found; non-chained mode")
	default:
		return fail(name, "Multus is the primary CNI here, so a chain entry in its config is never run for the pod network",
			"install in non-chained mode (--set platform=openshift on OpenShift, else --set cni.chained=false) and run this check with --chained=false",
			found...)
	}
}
