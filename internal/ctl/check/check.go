package check

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Options say what the checks expect of the cluster.
type Options struct {
	// Namespace mesh-cni is (or will be) installed in.
	Namespace string
	// Version the agents must report (the CLI's own version).
	Version string
	// Chained is false when the install uses the non-chained mode
	// (Multus, OpenShift); it decides whether Multus is a conflict.
	Chained bool
	// Timeout bounds each API call.
	Timeout time.Duration
}

// DefaultNamespace is the chart's and the kustomize base's namespace.
const DefaultNamespace = "mesh-cni"

// Cluster is what the checks share: the client and the nodes, read once.
type Cluster struct {
	Client kubernetes.Interface
	Opts   Options

	nodes    []corev1.Node
	nodesErr error
	nodesSet bool
}

// NewCluster prepares a run against client.
func NewCluster(client kubernetes.Interface, opts Options) *Cluster {
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Second
	}
	return &Cluster{Client: client, Opts: opts}
}

// Func is one check.
type Func func(ctx context.Context, c *Cluster) Result

// Nodes lists the cluster's nodes once per run.
func (c *Cluster) Nodes(ctx context.Context) ([]corev1.Node, error) {
	if !c.nodesSet {
		ctx, cancel := context.WithTimeout(ctx, c.Opts.Timeout)
		defer cancel()
		l, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		c.nodesSet = true
		if err != nil {
			c.nodesErr = fmt.Errorf("list nodes: %w", err)
		} else {
			c.nodes = l.Items
		}
	}
	return c.nodes, c.nodesErr
}

// PreChecks run before install.
func PreChecks() []Func {
	return []Func{
		APIReachable,
		CanCreate("apps", "daemonsets", "DaemonSets", true),
		CanCreate("", "serviceaccounts", "ServiceAccounts", true),
		CanCreate("", "configmaps", "ConfigMaps", true),
		CanCreate("rbac.authorization.k8s.io", "roles", "Roles", true),
		CanCreate("rbac.authorization.k8s.io", "rolebindings", "RoleBindings", true),
		CanCreate("rbac.authorization.k8s.io", "clusterroles", "ClusterRoles", false),
		CanCreate("rbac.authorization.k8s.io", "clusterrolebindings", "ClusterRoleBindings", false),
		NamespaceAllowsHostPath,
		NodesSupported,
		PrimaryCNIPresent,
		CiliumSettings,
		MultusMode,
	}
}

// PostChecks run against an installed mesh-cni.
func PostChecks() []Func {
	return []Func{
		APIReachable,
		DaemonSetReady,
		AgentsReady,
		NoOtherMeshPlugin,
		OwnNodePolicy,
		VersionsMatch,
		NoRepairCandidates,
		CiliumSettings,
		MultusMode,
	}
}

// Run runs the checks in order. When the API server cannot be reached the
// rest are not run: each would only repeat that failure.
func Run(ctx context.Context, c *Cluster, checks []Func) []Result {
	var out []Result
	for _, f := range checks {
		r := f(ctx, c)
		out = append(out, r)
		if r.Name == apiReachableName && r.Status == Fail {
			break
		}
	}
	return out
}

// ok, warn and fail build Results.
func ok(name, msg string) Result { return Result{Name: name, Status: OK, Message: msg} }

func fail(name, msg, hint string, details ...string) Result {
	return Result{Name: name, Status: Fail, Message: msg, Hint: hint, Details: details}
}

func warn(name, msg, hint string, details ...string) Result {
	return Result{Name: name, Status: Warn, Message: msg, Hint: hint, Details: details}
}

func (c *Cluster) timeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.Opts.Timeout)
}
