package check

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

func TestAPIUnreachable(t *testing.T) {
	// A port nothing listens on: a real connection refused.
	client, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1", Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rs := Run(context.Background(), NewCluster(client, Options{}), PreChecks())
	if len(rs) != 1 {
		t.Fatalf("want the run to stop after the unreachable API server, got %d results", len(rs))
	}
	wantStatus(t, rs[0], Fail)
	if !strings.Contains(rs[0].Message, "127.0.0.1:1") {
		t.Errorf("message should name the server: %q", rs[0].Message)
	}
}

func TestCanCreate(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t, "mesh-cni")
	opts := Options{Namespace: ns}
	checks := PreChecks()[1:8]

	for _, f := range checks {
		wantStatus(t, runOne(t, env, f, opts), OK)
	}

	// A user with no rights at all, then with DaemonSets only.
	_, client := env.ServiceAccountClient(t, ns, "installer")
	c := NewCluster(client, opts)
	for _, f := range checks {
		r := f(context.Background(), c)
		wantStatus(t, r, Fail)
		if !strings.Contains(r.Message, "not allowed") {
			t.Errorf("%s: message %q", r.Name, r.Message)
		}
	}
	env.BindClusterRole(t, ns, "installer", []rbacv1.PolicyRule{{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: []string{"create"}}})
	c = NewCluster(client, opts)
	wantStatus(t, checks[0](context.Background(), c), OK)
	for _, f := range checks[1:] {
		wantStatus(t, f(context.Background(), c), Fail)
	}
}

func TestNamespaceAllowsHostPath(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	mk := func(level string) string {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "psa-"}}
		if level != "" {
			ns.Labels = map[string]string{psaEnforceLabel: level}
		}
		got, err := env.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got.Name
	}
	tests := []struct {
		name, ns string
		want     Status
		hint     string
	}{
		{"privileged", mk("privileged"), OK, ""},
		{"baseline", mk("baseline"), Fail, "pod-security.kubernetes.io/enforce=privileged"},
		{"restricted", mk("restricted"), Fail, "kubectl label --overwrite namespace"},
		{"no label", mk(""), Fail, "kubectl label --overwrite namespace"},
		{"absent", "no-such-namespace", Fail, "kubectl create namespace no-such-namespace"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := runOne(t, env, NamespaceAllowsHostPath, Options{Namespace: tc.ns})
			wantStatus(t, r, tc.want)
			if !strings.Contains(r.Hint, tc.hint) {
				t.Errorf("hint %q does not contain %q", r.Hint, tc.hint)
			}
		})
	}
}

func TestNodesSupported(t *testing.T) {
	env := testenv.Start(t)
	r := runOne(t, env, NodesSupported, Options{})
	wantStatus(t, r, Fail)
	if r.Message != "the cluster has no nodes" {
		t.Errorf("message %q", r.Message)
	}

	makeNode(t, env, "amd", nodeSpec{os: "linux", arch: "amd64"})
	makeNode(t, env, "arm", nodeSpec{os: "linux", arch: "arm64"})
	wantStatus(t, runOne(t, env, NodesSupported, Options{}), OK)

	makeNode(t, env, "win", nodeSpec{os: "windows", arch: "amd64"})
	wantStatus(t, runOne(t, env, NodesSupported, Options{}), Warn, "node win: windows/amd64")

	makeNode(t, env, "mainframe", nodeSpec{os: "linux", arch: "s390x"})
	wantStatus(t, runOne(t, env, NodesSupported, Options{}), Fail, "node mainframe: linux/s390x")
}

func TestPrimaryCNIPresent(t *testing.T) {
	env := testenv.Start(t)
	makeNode(t, env, "good", nodeSpec{})
	makeNode(t, env, "win", nodeSpec{os: "windows", arch: "amd64", notReady: "ignored"})
	// Not ready by its conditions, but the agent found a primary config.
	makeNode(t, env, "agent-says", nodeSpec{notReady: "something else", status: readyStatus("v1", time.Now())})
	wantStatus(t, runOne(t, env, PrimaryCNIPresent, Options{}), OK)

	msg := "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"
	makeNode(t, env, "nocni", nodeSpec{notReady: msg})
	makeNode(t, env, "noroute", nodeSpec{netUnavail: true})
	wantStatus(t, runOne(t, env, PrimaryCNIPresent, Options{}), Fail,
		"node nocni: Ready=False: "+msg,
		"node noroute: NetworkUnavailable: route controller has not created a route")
}

func TestMultusMode(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	wantStatus(t, runOne(t, env, MultusMode, Options{Chained: true}), OK)

	dss := env.Client.AppsV1().DaemonSets("kube-system")
	labels := map[string]string{"app": "multus"}
	_, err := dss.Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-multus-ds"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "kube-multus", Image: "multus:thin"}}},
			},
		}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer dss.Delete(ctx, "kube-multus-ds", metav1.DeleteOptions{})
	wantStatus(t, runOne(t, env, MultusMode, Options{Chained: true}), Fail, "DaemonSet kube-system/kube-multus-ds")
	wantStatus(t, runOne(t, env, MultusMode, Options{Chained: false}), OK)

	deleteNamespace := createNamespace(t, env, "openshift-multus")
	defer deleteNamespace()
	wantStatus(t, runOne(t, env, MultusMode, Options{Chained: true}), Fail,
		"DaemonSet kube-system/kube-multus-ds", "namespace openshift-multus (OpenShift)")
}

// createNamespace creates a namespace by name and returns how to remove it
// again; with no namespace controller running, that means finalizing it.
func createNamespace(t *testing.T, env *testenv.Env, name string) func() {
	t.Helper()
	ctx := context.Background()
	nss := env.Client.CoreV1().Namespaces()
	if _, err := nss.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := nss.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Error(err)
			return
		}
		ns, err := nss.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return
		}
		ns.Spec.Finalizers = nil
		if _, err := nss.Finalize(ctx, ns, metav1.UpdateOptions{}); err != nil {
			t.Error(err)
		}
	}
}
