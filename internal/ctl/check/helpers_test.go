package check

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func nodeWith(ann string) *corev1.Node {
	n := &corev1.Node{}
	if ann != "" {
		n.Annotations = map[string]string{StatusAnnotation: ann}
	}
	return n
}

// nodeSpec is how a test node looks: its platform, readiness and the
// agent's annotation.
type nodeSpec struct {
	os, arch      string
	notReady      string // Ready=False with this message
	netUnavail    bool
	status        string // agent-status annotation, "" for none
	unschedulable bool
}

// makeNode creates a Node the way a kubelet would report it.
func makeNode(t *testing.T, env *testenv.Env, name string, s nodeSpec) {
	t.Helper()
	ctx := context.Background()
	if s.os == "" {
		s.os, s.arch = "linux", "amd64"
	}
	n := env.Node(t, name)
	n.Labels = map[string]string{corev1.LabelOSStable: s.os, corev1.LabelArchStable: s.arch}
	if s.status != "" {
		n.Annotations = map[string]string{StatusAnnotation: s.status}
	}
	n.Spec.Unschedulable = s.unschedulable
	n, err := env.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.NodeInfo.OperatingSystem, n.Status.NodeInfo.Architecture = s.os, s.arch
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status"}
	if s.notReady != "" {
		ready.Status, ready.Reason, ready.Message = corev1.ConditionFalse, "KubeletNotReady", s.notReady
	}
	n.Status.Conditions = []corev1.NodeCondition{ready}
	if s.netUnavail {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{
			Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionTrue, Reason: "NoRouteCreated", Message: "route controller has not created a route"})
	}
	if _, err := env.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func readyStatus(version string, since time.Time) string {
	return `{"ready":true,"version":"` + version + `","backend":"nftables","binary":"/opt/cni/bin/mesh-cni",` +
		`"conf":"/etc/cni/net.d/10-kindnet.conflist","kubeconfig":"/var/lib/mesh-cni/kubeconfig","time":"` +
		since.UTC().Format(time.RFC3339Nano) + `"}`
}

// runOne runs one check against env as the admin.
func runOne(t *testing.T, env *testenv.Env, f Func, opts Options) Result {
	t.Helper()
	return f(context.Background(), NewCluster(env.Client, opts))
}

func wantStatus(t *testing.T, r Result, want Status, details ...string) {
	t.Helper()
	if r.Status != want {
		t.Fatalf("%s: status %s, want %s (message %q, details %q)", r.Name, r.Status, want, r.Message, r.Details)
	}
	if want != OK && r.Hint == "" {
		t.Errorf("%s: a %s without a hint", r.Name, want)
	}
	for _, d := range details {
		found := false
		for _, got := range r.Details {
			if got == d {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: missing detail %q in %q", r.Name, d, r.Details)
		}
	}
	if details != nil && len(details) != len(r.Details) {
		t.Errorf("%s: details %q, want exactly %q", r.Name, r.Details, details)
	}
}
