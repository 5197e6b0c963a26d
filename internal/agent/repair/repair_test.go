package repair

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// The disruption controller computes PodDisruptionBudget status for real, so
// the Eviction API answers as in a cluster.
func TestMain(m *testing.M) { testenv.Main(m, testenv.WithControllers("disruption")) }

// attempts records OnAttempt calls.
type attempts struct {
	mu    sync.Mutex
	list  []Outcome
	times []time.Time
}

func (a *attempts) hook(_ Policy, o Outcome) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.list = append(a.list, o)
	a.times = append(a.times, time.Now())
}

func (a *attempts) count(o Outcome) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, x := range a.list {
		if x == o {
			n++
		}
	}
	return n
}

// startRepair runs the controller with client until the test ends.
func startRepair(t *testing.T, client kubernetes.Interface, opts Options) *attempts {
	t.Helper()
	a := &attempts{}
	opts.OnAttempt = a.hook
	if opts.RetryBase == 0 {
		opts.RetryBase, opts.RetryMax = 100*time.Millisecond, time.Second
	}
	opts.ActionsPerSecond, opts.Burst = 20, 20
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, client.CoreV1(), opts) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(testenv.Timeout()):
			t.Errorf("Run did not return within %v after cancel", testenv.Timeout())
		}
	})
	return a
}

// podWithValidator creates a pod on node with an init container named
// validator and writes, as a kubelet would, a status where that container
// terminated with code (and is in back-off when code is not 0).
func podWithValidator(t *testing.T, c kubernetes.Interface, ns, name, node, validator string, code int32, labels map[string]string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	p, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:       node,
			InitContainers: []corev1.Container{{Name: validator, Image: "validator:1"}},
			Containers:     []corev1.Container{{Name: "app", Image: "app:1"}, {Name: "proxy", Image: "proxy:1"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	st := corev1.ContainerStatus{Name: validator, Image: "validator:1", RestartCount: 1}
	if code == 0 {
		st.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}
	} else {
		st.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}
		st.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Error"}
	}
	p.Status = corev1.PodStatus{
		Phase:                 corev1.PodPending,
		InitContainerStatuses: []corev1.ContainerStatus{st},
		Conditions:            []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}},
	}
	p, err = c.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update status of %s: %v", name, err)
	}
	return p
}

func getPod(t *testing.T, c kubernetes.Interface, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s: %v", name, err)
	}
	return p
}

// terminating: a pod bound to a node is deleted gracefully; with no kubelet
// to finish it, an evicted or deleted pod stays with a deletionTimestamp.
func terminating(t *testing.T, c kubernetes.Interface, ns, name string) bool {
	return getPod(t, c, ns, name).DeletionTimestamp != nil
}

func events(t *testing.T, c kubernetes.Interface, ns, pod string) []corev1.Event {
	t.Helper()
	l, err := c.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", pod).String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func hasEvent(t *testing.T, c kubernetes.Interface, ns, pod, reason string) bool {
	for _, e := range events(t, c, ns, pod) {
		if e.Reason == reason && e.Source.Component == EventComponent {
			return true
		}
	}
	return false
}

// never checks that cond stays false while the controller has had time to act
// (it has acted on the pods created before, which the caller waited for).
func never(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if cond() {
		t.Fatalf("unexpected: %s", what)
	}
}

func TestEvictPolicy(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t, "repair")
	env.Node(t, "rp-evict")
	env.Node(t, "rp-other")
	podWithValidator(t, env.Client, ns, "istio-broken", "rp-evict", "istio-validation", 126, nil)
	podWithValidator(t, env.Client, ns, "linkerd-broken", "rp-evict", "linkerd-network-validator", 95, nil)
	podWithValidator(t, env.Client, ns, "healthy", "rp-evict", "mesh-cni-validator", 0, nil)
	podWithValidator(t, env.Client, ns, "other-code", "rp-evict", "mesh-cni-validator", 1, nil)
	podWithValidator(t, env.Client, ns, "other-node", "rp-other", "mesh-cni-validator", 97, nil)

	a := startRepair(t, env.Client, Options{NodeName: "rp-evict", Policy: Evict})

	for _, name := range []string{"istio-broken", "linkerd-broken"} {
		testenv.EventuallyTrue(t, name+" evicted", func() bool { return terminating(t, env.Client, ns, name) })
		testenv.EventuallyTrue(t, name+" event", func() bool { return hasEvent(t, env.Client, ns, name, ReasonEvicted) })
	}
	// A pod that breaks later is found through the watch.
	podWithValidator(t, env.Client, ns, "late", "rp-evict", "mesh-cni-validator", 97, nil)
	testenv.EventuallyTrue(t, "late evicted", func() bool { return terminating(t, env.Client, ns, "late") })

	for _, name := range []string{"healthy", "other-code", "other-node"} {
		never(t, name+" evicted", func() bool { return terminating(t, env.Client, ns, name) })
		if ev := events(t, env.Client, ns, name); len(ev) != 0 {
			t.Fatalf("%s got events: %+v", name, ev)
		}
	}
	if n := a.count(Repaired); n != 3 {
		t.Fatalf("repaired attempts reported: %d, want 3 (%v)", n, a.list)
	}
}

// guard creates the budget "guard" that keeps one pod labelled app=app
// available: with one such pod, it allows no eviction.
func guard(t *testing.T, client kubernetes.Interface, ns, app string) *policyv1.PodDisruptionBudget {
	t.Helper()
	one := intstr.FromInt32(1)
	pdb, err := client.PolicyV1().PodDisruptionBudgets(ns).Create(context.Background(), &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "guard"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: &one,
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pdb
}

// A PodDisruptionBudget that allows no disruption blocks the eviction: the
// pod stays, the attempt is retried with back-off (no hot loop), and it is
// evicted once the budget allows it.
func TestEvictRespectsDisruptionBudget(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	ns := env.Namespace(t, "repair")
	env.Node(t, "rp-pdb")
	pdb := guard(t, env.Client, ns, "guarded")
	p := podWithValidator(t, env.Client, ns, "guarded", "rp-pdb", "istio-validation", 126, map[string]string{"app": "guarded"})
	// The Eviction API ignores budgets for Pending pods (a first start stuck
	// in init); they protect pods that had been running, as one re-running
	// its init containers after its sandbox was recreated (node reboot).
	p.Status.Phase = corev1.PodRunning
	if _, err := env.Client.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	base := 200 * time.Millisecond
	a := startRepair(t, env.Client, Options{NodeName: "rp-pdb", Policy: Evict, RetryBase: base, RetryMax: 2 * time.Second})
	testenv.EventuallyTrue(t, "three blocked attempts", func() bool { return a.count(Blocked) >= 3 })
	testenv.EventuallyTrue(t, "blocked event", func() bool { return hasEvent(t, env.Client, ns, "guarded", ReasonEvictionBlocked) })
	never(t, "guarded pod evicted despite its budget", func() bool { return terminating(t, env.Client, ns, "guarded") })
	a.mu.Lock()
	gap := a.times[2].Sub(a.times[0])
	a.mu.Unlock()
	// Back-off: the 2nd attempt waits >= base, the 3rd >= 2*base.
	if gap < 3*base {
		t.Fatalf("retries not backed off: 3 attempts within %v", gap)
	}

	// The budget now allows evicting pods that are not ready.
	patch := []byte(`{"spec":{"unhealthyPodEvictionPolicy":"AlwaysAllow"}}`)
	if _, err := env.Client.PolicyV1().PodDisruptionBudgets(ns).Patch(ctx, pdb.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyTrue(t, "evicted once the budget allows it", func() bool { return terminating(t, env.Client, ns, "guarded") })
	testenv.EventuallyTrue(t, "evicted event", func() bool { return hasEvent(t, env.Client, ns, "guarded", ReasonEvicted) })
}

// delete ignores budgets, by definition.
func TestDeletePolicy(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t, "repair")
	env.Node(t, "rp-delete")
	guard(t, env.Client, ns, "x")
	podWithValidator(t, env.Client, ns, "broken", "rp-delete", "linkerd-network-validator", 95, map[string]string{"app": "x"})
	podWithValidator(t, env.Client, ns, "healthy", "rp-delete", "linkerd-network-validator", 0, map[string]string{"app": "x"})
	a := startRepair(t, env.Client, Options{NodeName: "rp-delete", Policy: Delete})
	testenv.EventuallyTrue(t, "deleted", func() bool { return terminating(t, env.Client, ns, "broken") })
	testenv.EventuallyTrue(t, "deleted event", func() bool { return hasEvent(t, env.Client, ns, "broken", ReasonDeleted) })
	never(t, "healthy deleted", func() bool { return terminating(t, env.Client, ns, "healthy") })
	if a.count(Repaired) != 1 {
		t.Fatalf("attempts: %v", a.list)
	}
}

func TestLabelPolicy(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	ns := env.Namespace(t, "repair")
	env.Node(t, "rp-label")
	podWithValidator(t, env.Client, ns, "broken", "rp-label", "mesh-cni-validator", 97, map[string]string{"app": "web"})
	a := startRepair(t, env.Client, Options{NodeName: "rp-label", Policy: Label, Label: "example.com/unmeshed=yes"})
	testenv.EventuallyTrue(t, "labelled", func() bool {
		return getPod(t, env.Client, ns, "broken").Labels["example.com/unmeshed"] == "yes"
	})
	testenv.EventuallyTrue(t, "label event", func() bool { return hasEvent(t, env.Client, ns, "broken", ReasonLabeled) })
	p := getPod(t, env.Client, ns, "broken")
	if p.DeletionTimestamp != nil || p.Labels["app"] != "web" {
		t.Fatalf("label policy changed more than the label: %+v", p.ObjectMeta)
	}
	// Another status update re-queues the pod; it is labelled already, so
	// nothing more is written.
	p.Status.InitContainerStatuses[0].RestartCount = 2
	if _, err := env.Client.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	podWithValidator(t, env.Client, ns, "marker", "rp-label", "istio-validation", 126, nil)
	testenv.EventuallyTrue(t, "marker labelled (the queue moved past the update)", func() bool {
		return getPod(t, env.Client, ns, "marker").Labels["example.com/unmeshed"] == "yes"
	})
	// OnAttempt runs after the patch returns: the label can be seen first.
	testenv.EventuallyTrue(t, "marker's attempt counted", func() bool { return a.count(Repaired) >= 2 })
	if n := a.count(Repaired); n != 2 {
		t.Fatalf("label attempts: %d, want 2 (%v)", n, a.list)
	}
}

// Custom validators replace the defaults; a label selector limits the pods.
func TestValidatorsAndSelector(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t, "repair")
	env.Node(t, "rp-custom")
	meshed := map[string]string{"mesh": "yes"}
	podWithValidator(t, env.Client, ns, "custom", "rp-custom", "custom-check", 3, meshed)
	podWithValidator(t, env.Client, ns, "custom-unselected", "rp-custom", "custom-check", 3, nil)
	podWithValidator(t, env.Client, ns, "istio", "rp-custom", "istio-validation", 126, meshed)
	a := startRepair(t, env.Client, Options{
		NodeName: "rp-custom", Policy: Delete, LabelSelector: "mesh=yes",
		Validators: []Validator{{Container: "custom-check", ExitCode: 3}},
	})
	testenv.EventuallyTrue(t, "custom validator's pod deleted", func() bool { return terminating(t, env.Client, ns, "custom") })
	// The marker pod is queued after the others: once it is repaired, the
	// others have been judged.
	podWithValidator(t, env.Client, ns, "marker", "rp-custom", "custom-check", 3, meshed)
	testenv.EventuallyTrue(t, "marker deleted", func() bool { return terminating(t, env.Client, ns, "marker") })
	never(t, "pod outside the selector deleted", func() bool { return terminating(t, env.Client, ns, "custom-unselected") })
	never(t, "default validator still recognised", func() bool { return terminating(t, env.Client, ns, "istio") })
	if n := a.count(Repaired); n != 2 {
		t.Fatalf("attempts: %v", a.list)
	}
}
