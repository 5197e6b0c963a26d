package taint

import (
	"context"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const key = "mesh-cni.io/not-ready"

func TestRemove(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	other := corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoExecute}
	// The API server's TaintNodesByCondition admission adds
	// node.kubernetes.io/not-ready too: it must survive as well.
	before := env.Node(t, "taint-a",
		corev1.Taint{Key: key, Effect: corev1.TaintEffectNoSchedule},
		other,
		corev1.Taint{Key: key, Value: "x", Effect: corev1.TaintEffectNoExecute})

	if err := Remove(ctx, env.Client.CoreV1(), "taint-a", key); err != nil {
		t.Fatal(err)
	}
	n, err := env.Client.CoreV1().Nodes().Get(ctx, "taint-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var want []corev1.Taint
	for _, tt := range before.Spec.Taints {
		if tt.Key != key {
			want = append(want, tt)
		}
	}
	if Has(n, key) || !Has(n, other.Key) || !reflect.DeepEqual(n.Spec.Taints, want) {
		t.Fatalf("taints after Remove: %+v, want %+v", n.Spec.Taints, want)
	}

	// Idempotent: nothing to remove means no write at all.
	if err := Remove(ctx, env.Client.CoreV1(), "taint-a", key); err != nil {
		t.Fatal(err)
	}
	n2, err := env.Client.CoreV1().Nodes().Get(ctx, "taint-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n2.ResourceVersion != n.ResourceVersion {
		t.Fatalf("second Remove wrote the node (rv %s -> %s)", n.ResourceVersion, n2.ResourceVersion)
	}
}

// A taint another writer adds between our read and our write survives: the
// stale patch is refused with a conflict and retried on a fresh read.
func TestRemoveConcurrentWriter(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	env.Node(t, "taint-b", corev1.Taint{Key: key, Effect: corev1.TaintEffectNoSchedule})
	calls := 0
	beforePatch = func() {
		calls++
		if calls > 1 {
			return
		}
		n, err := env.Client.CoreV1().Nodes().Get(ctx, "taint-b", metav1.GetOptions{})
		if err != nil {
			t.Error(err)
			return
		}
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "node.kubernetes.io/unreachable", Effect: corev1.TaintEffectNoSchedule})
		if _, err := env.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Error(err)
		}
	}
	defer func() { beforePatch = nil }()

	if err := Remove(ctx, env.Client.CoreV1(), "taint-b", key); err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Fatalf("patch attempts: %d, want 2 (one conflict, one retry)", calls)
	}
	n, err := env.Client.CoreV1().Nodes().Get(ctx, "taint-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if Has(n, key) || !Has(n, "node.kubernetes.io/unreachable") {
		t.Fatalf("taints: %+v", n.Spec.Taints)
	}
}

func TestRemoveErrors(t *testing.T) {
	env := testenv.Start(t)
	if err := Remove(context.Background(), env.Client.CoreV1(), "no-such-node", key); err == nil {
		t.Fatal("missing node: no error")
	}
	if err := Remove(context.Background(), env.Client.CoreV1(), "no-such-node", ""); err == nil {
		t.Fatal("empty key: no error")
	}
}
