package main

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/retrytest"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// waitDelays waits until log holds n retry waits.
func waitDelays(t *testing.T, log *retrytest.Log, n int) {
	t.Helper()
	deadline := time.Now().Add(testenv.Timeout())
	for len(log.Delays()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d retries logged, want %d: %v", len(log.Delays()), n, log.Messages())
		}
		time.Sleep(time.Millisecond)
	}
}

// cancelInWait runs run until it waits for its first retry, then cancels
// its ctx and fails unless run returns.
func cancelInWait(t *testing.T, log *retrytest.Log, run func(ctx context.Context)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); run(ctx) }()
	waitDelays(t, log, 1)
	cancel()
	select {
	case <-done:
	case <-time.After(testenv.Timeout()):
		t.Fatal("still retrying after cancel")
	}
}

// The startup taint is retried on the jittered, capped backoff while the
// Node cannot be read (it does not exist yet), and removed once it can.
func TestFirstReadyRetry(t *testing.T) {
	env := testenv.Start(t)
	var log retrytest.Log
	b := retrytest.Fast()
	cfg := &config{nodeName: "backoff-taint", startupTaint: "mesh-cni.io/not-ready"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	fn := firstReady(ctx, &clients{core: env.Client.CoreV1()}, cfg, b, log.Logger())
	go func() { defer close(done); fn() }()

	waitDelays(t, &log, 5)
	env.Node(t, cfg.nodeName, corev1.Taint{Key: cfg.startupTaint, Effect: corev1.TaintEffectNoSchedule})
	select {
	case <-done:
	case <-time.After(testenv.Timeout()):
		t.Fatal("taint not removed after the Node appeared")
	}
	retrytest.Check(t, b, log.Delays())
	n, err := env.Client.CoreV1().Nodes().Get(ctx, cfg.nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range n.Spec.Taints {
		if tt.Key == cfg.startupTaint {
			t.Fatalf("startup taint left: %v", n.Spec.Taints)
		}
	}
	if m := log.Messages(); m[len(m)-1] != "removed the startup taint" {
		t.Fatalf("last log %q, want the removal", m[len(m)-1])
	}
}

// Cancelling ends the taint retries during a wait, without a removal log.
func TestFirstReadyCancel(t *testing.T) {
	env := testenv.Start(t)
	var log retrytest.Log
	b := retrytest.Fast()
	b.Duration, b.Cap = time.Hour, time.Hour
	cfg := &config{nodeName: "backoff-taint-missing", startupTaint: "mesh-cni.io/not-ready"}
	cancelInWait(t, &log, func(ctx context.Context) {
		firstReady(ctx, &clients{core: env.Client.CoreV1()}, cfg, b, log.Logger())()
	})
	if m := log.Messages(); len(m) != 1 {
		t.Fatalf("logged %q, want the one failure", m)
	}
}

// refusedProbe is a DaemonSet probe in a namespace of its own, as an
// account no role grants anything yet (every GET is a 403), retrying on b
// and logging to log.
func refusedProbe(t *testing.T, env *testenv.Env, b wait.Backoff, log *retrytest.Log) *dsProbe {
	t.Helper()
	ns := env.Namespace(t, "probe")
	_, client := env.ServiceAccountClient(t, ns, "agent")
	return &dsProbe{daemonSets: client.AppsV1(), namespace: ns, name: "mesh-cni", log: log.Logger(), backoff: b}
}

// The DaemonSet probe retries a refused GET (403: no RBAC yet) on the
// jittered, capped backoff and counts the lookup allowed once a GET is
// answered (here NotFound, once the role is bound).
func TestDSProbeRetry(t *testing.T) {
	env := testenv.Start(t)
	var log retrytest.Log
	b := retrytest.Fast()
	p := refusedProbe(t, env, b, &log)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); p.run(ctx) }()

	waitDelays(t, &log, 5)
	if p.allowed.Load() {
		t.Fatal("allowed while every GET is refused")
	}
	env.BindClusterRole(t, p.namespace, "agent", []rbacv1.PolicyRule{{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: []string{"get", "list", "watch"}}})
	testenv.EventuallyTrue(t, "a NotFound answer counts as allowed", p.allowed.Load)
	// Allowed, the probe watches: no more failed lookups to wait after.
	retries := len(log.Delays())
	cancel()
	<-done
	if p.deleted.Load() != true {
		t.Error("a DaemonSet that is not found was not taken as deleted")
	}
	if n := len(log.Delays()); n > retries+1 {
		t.Errorf("%d more retries after the lookup was allowed", n-retries)
	}
	retrytest.Check(t, b, log.Delays())
}

// Cancelling ends the probe during a wait, not allowed.
func TestDSProbeCancel(t *testing.T) {
	var log retrytest.Log
	b := retrytest.Fast()
	b.Duration, b.Cap = time.Hour, time.Hour
	p := refusedProbe(t, testenv.Start(t), b, &log)
	cancelInWait(t, &log, p.run)
	if p.allowed.Load() || len(log.Delays()) != 1 {
		t.Fatalf("allowed=%v after %d retries, want false after 1", p.allowed.Load(), len(log.Delays()))
	}
}
