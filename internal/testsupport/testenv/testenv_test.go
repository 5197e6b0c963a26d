package testenv_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestServerVersion(t *testing.T) {
	env := testenv.Start(t)
	v, err := env.Client.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != testenv.KubernetesVersion {
		t.Fatalf("server reports %s, want %s (version ldflags missing?)", v.GitVersion, testenv.KubernetesVersion)
	}
}

// A service account has nothing until a role is bound: RBAC is enforced.
func TestServiceAccountRBAC(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	ns := env.Namespace(t, "rbac")
	_, c := env.ServiceAccountClient(t, ns, "agent")

	_, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("unbound service account listed pods: err=%v", err)
	}
	env.BindClusterRole(t, ns, "agent", []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"},
	}})
	// RBAC changes reach the authorizer through an informer: poll briefly.
	if err := waitNoErr(ctx, func() error {
		_, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err
	}); err != nil {
		t.Fatalf("bound service account cannot list pods: %v", err)
	}
	if _, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("service account listed nodes without a rule for it: err=%v", err)
	}
}

// Pods can be created once the namespace has its default service account,
// and bound to a Node object with no kubelet.
func TestPodOnNodeObject(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	ns := env.Namespace(t, "pods")
	env.Node(t, "testenv-node")
	pod, err := env.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{
			NodeName:   "testenv-node",
			Containers: []corev1.Container{{Name: "app", Image: "app:1"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Spec.NodeName != "testenv-node" || pod.Spec.ServiceAccountName != "default" {
		t.Fatalf("pod spec not admitted as expected: node %q sa %q", pod.Spec.NodeName, pod.Spec.ServiceAccountName)
	}
}

func TestKubeconfigWithKubectl(t *testing.T) {
	env := testenv.Start(t)
	kubectl, err := testenv.Binary("kubectl")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(kubectl, "--kubeconfig", env.Kubeconfig, "auth", "can-i", "create", "pods/eviction").CombinedOutput()
	if err != nil {
		// kubectl is built by the same script; a missing one is a setup error.
		t.Fatalf("kubectl auth can-i: %v: %s", err, out)
	}
	if strings.TrimSpace(string(out)) != "yes" {
		t.Fatalf("admin kubeconfig cannot create evictions: %s", out)
	}
}

func waitNoErr(ctx context.Context, f func() error) error {
	ctx, cancel := context.WithTimeout(ctx, testenv.Timeout())
	defer cancel()
	for {
		err := f()
		if err == nil || ctx.Err() != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
