package check

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// agentDaemonSet creates the agent DaemonSet as the chart labels it, with
// the given status (no controller runs to fill it in).
func agentDaemonSet(t *testing.T, env *testenv.Env, ns, version string, st appsv1.DaemonSetStatus) {
	t.Helper()
	ctx := context.Background()
	sel := map[string]string{nameLabel: appName, "app.kubernetes.io/instance": "mesh-cni"}
	labels := map[string]string{nameLabel: appName, "app.kubernetes.io/instance": "mesh-cni", versionLabel: version}
	ds, err := env.Client.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "mesh-cni", Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "mesh-cni:" + version}}},
			},
		}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ds.Status = st
	if _, err := env.Client.AppsV1().DaemonSets(ns).UpdateStatus(ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// pod creates a pod bound to node and sets its status.
func pod(t *testing.T, env *testenv.Env, ns, name, node string, labels map[string]string, spec corev1.PodSpec, st corev1.PodStatus) {
	t.Helper()
	ctx := context.Background()
	spec.NodeName = node
	p, err := env.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase == "" {
		st.Phase = corev1.PodRunning
	}
	p.Status = st
	if _, err := env.Client.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func readyPod() corev1.PodStatus {
	return corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
}

func agentPod(t *testing.T, env *testenv.Env, ns, node string, ready bool) {
	st := corev1.PodStatus{}
	if ready {
		st = readyPod()
	}
	pod(t, env, ns, "mesh-cni-"+node, node, map[string]string{nameLabel: appName, "app.kubernetes.io/instance": "mesh-cni"},
		corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "mesh-cni"}}}, st)
}

func TestDaemonSetReady(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t, "mesh-cni")
	opts := Options{Namespace: ns, Version: "v1"}
	r := runOne(t, env, DaemonSetReady, opts)
	wantStatus(t, r, Fail)
	if !strings.Contains(r.Message, "no mesh-cni DaemonSet") {
		t.Errorf("message %q", r.Message)
	}
	// An uninstall that left a node chained: the node still says so.
	makeNode(t, env, "left", nodeSpec{status: readyStatus("v1", time.Now())})
	wantStatus(t, runOne(t, env, DaemonSetReady, opts), Fail,
		"node left: mesh-cni.io/agent-status says mesh-cni is chained into /etc/cni/net.d/10-kindnet.conflist")
	if err := env.Client.CoreV1().Nodes().Delete(context.Background(), "left", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	makeNode(t, env, "n1", nodeSpec{})
	makeNode(t, env, "n2", nodeSpec{})
	makeNode(t, env, "cordoned", nodeSpec{unschedulable: true})
	makeNode(t, env, "win", nodeSpec{os: "windows", arch: "amd64"})
	agentDaemonSet(t, env, ns, "v1", appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, CurrentNumberScheduled: 2, UpdatedNumberScheduled: 2, NumberReady: 1})
	agentPod(t, env, ns, "n1", true)
	agentPod(t, env, ns, "n2", false)
	r = runOne(t, env, DaemonSetReady, opts)
	wantStatus(t, r, Fail, "DaemonSet "+ns+"/mesh-cni: 2 desired, 2 updated, 1 ready", "node n2: no ready agent pod")
	if r.Message != "1/2 schedulable nodes have a ready agent" {
		t.Errorf("message %q", r.Message)
	}

	// n2 becomes ready; the status says so too.
	p, err := env.Client.CoreV1().Pods(ns).Get(context.Background(), "mesh-cni-n2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status = readyPod()
	if _, err := env.Client.CoreV1().Pods(ns).UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ds, err := env.Client.AppsV1().DaemonSets(ns).Get(context.Background(), "mesh-cni", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ds.Status.NumberReady = 2
	if _, err := env.Client.AppsV1().DaemonSets(ns).UpdateStatus(context.Background(), ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, runOne(t, env, DaemonSetReady, opts), OK)

	// A new node the DaemonSet does not cover (e.g. a taint it does not tolerate).
	makeNode(t, env, "n3", nodeSpec{})
	wantStatus(t, runOne(t, env, DaemonSetReady, opts), Fail, "node n3: no ready agent pod")
}

func TestAgentsReady(t *testing.T) {
	env := testenv.Start(t)
	opts := Options{Namespace: "mesh-cni", Version: "v1"}
	makeNode(t, env, "good", nodeSpec{status: readyStatus("v1", time.Now())})
	makeNode(t, env, "cordoned", nodeSpec{unschedulable: true})
	wantStatus(t, runOne(t, env, AgentsReady, opts), OK)

	makeNode(t, env, "none", nodeSpec{})
	makeNode(t, env, "garbage", nodeSpec{status: "{not json"})
	makeNode(t, env, "waiting", nodeSpec{status: `{"ready":false,"reason":"no primary CNI config in /etc/cni/net.d"}`})
	makeNode(t, env, "half", nodeSpec{status: `{"ready":true,"binary":"/opt/cni/bin/mesh-cni","conf":"/etc/cni/net.d/10-kindnet.conflist"}`})
	r := runOne(t, env, AgentsReady, opts)
	wantStatus(t, r, Fail,
		"node none: no mesh-cni.io/agent-status annotation (agent not running or not yet started)",
		"node garbage: mesh-cni.io/agent-status is not valid JSON: invalid character 'n' looking for beginning of object key string",
		"node waiting: not ready: no primary CNI config in /etc/cni/net.d",
		"node half: ready but reports no kubeconfig, backend")
	if r.Message != "1/5 nodes ready" {
		t.Errorf("message %q", r.Message)
	}
}

// A node whose agent refused to chain: check prints the reason (which
// names the fix) and where to read more.
func TestAgentsReadyRefused(t *testing.T) {
	env := testenv.Start(t)
	opts := Options{Namespace: "mesh-cni", Version: "v1"}
	reason := `refusing to chain: CNI bin dir /host/opt/cni/bin lacks ptp, host-local, which the primary config 10-kindnet.conflist runs: it is not the bin dir the runtime uses (set cni.binDir to the runtime's bin dir)`
	st, _ := json.Marshal(map[string]any{"ready": false, "reason": reason})
	makeNode(t, env, "wrongdir", nodeSpec{status: string(st)})
	r := runOne(t, env, AgentsReady, opts)
	wantStatus(t, r, Fail, "node wrongdir: not ready: "+reason)
	for _, s := range []string{"refused to chain", "last good entry", "reason=MeshCNIConfigRefused", "The agent refuses to chain"} {
		if !strings.Contains(r.Hint, s) {
			t.Errorf("hint %q lacks %q", r.Hint, s)
		}
	}
}

func TestVersionsMatch(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t, "mesh-cni")
	opts := Options{Namespace: ns, Version: "v0.2.0"}
	makeNode(t, env, "new", nodeSpec{status: readyStatus("v0.2.0", time.Now())})
	makeNode(t, env, "garbage", nodeSpec{status: "{"}) // reported by AgentsReady, not here
	agentDaemonSet(t, env, ns, "v0.2.0", appsv1.DaemonSetStatus{})
	wantStatus(t, runOne(t, env, VersionsMatch, opts), OK)

	makeNode(t, env, "old", nodeSpec{status: readyStatus("v0.1.0", time.Now())})
	wantStatus(t, runOne(t, env, VersionsMatch, opts), Fail, "node old: agent v0.1.0")

	opts.Version = "v0.3.0"
	wantStatus(t, runOne(t, env, VersionsMatch, opts), Fail,
		"DaemonSet mesh-cni: app.kubernetes.io/version=v0.2.0", "node new: agent v0.2.0", "node old: agent v0.1.0")
}

func TestNoRepairCandidates(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t, "app")
	opts := Options{Namespace: "mesh-cni", Version: "v1"}
	linkerd := corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}, {Name: "linkerd-proxy", Image: "proxy"}}}
	istio := corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "istio-validation", Image: "proxy"}},
		Containers:     []corev1.Container{{Name: "app", Image: "app"}, {Name: "istio-proxy", Image: "proxy"}},
	}
	plain := corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}
	started := func(at time.Time) corev1.PodStatus { return corev1.PodStatus{StartTime: &metav1.Time{Time: at}} }

	now := time.Now()
	makeNode(t, env, "late", nodeSpec{status: readyStatus("v1", now.Add(time.Hour))}) // agent ready after the pods started
	makeNode(t, env, "early", nodeSpec{status: readyStatus("v1", now.Add(-time.Hour))})
	pod(t, env, ns, "meshed-early", "early", nil, linkerd, started(now))
	pod(t, env, ns, "plain-late", "late", nil, plain, started(now))
	wantStatus(t, runOne(t, env, NoRepairCandidates, opts), OK)

	pod(t, env, ns, "meshed-late", "late", nil, linkerd, started(now))
	// Created before the agent was ready, but reached the node afterwards.
	pod(t, env, ns, "scheduled-after", "late", nil, linkerd, started(now.Add(2*time.Hour)))
	late := "pod " + ns + "/meshed-late on late: started " + now.UTC().Format(time.RFC3339) + ", agent ready since " + now.Add(time.Hour).UTC().Format(time.RFC3339)
	// The start time alone is enough: the agent keeps its ready time
	// across its own restarts, so a start before it means the pod reached
	// the node before the plugin was chained there.
	r := runOne(t, env, NoRepairCandidates, opts)
	wantStatus(t, r, Fail, late)

	// Its validator saw no redirect (Istio's exit code); its node looks fine.
	pod(t, env, ns, "istio-failed", "early", nil, istio, corev1.PodStatus{
		StartTime: &metav1.Time{Time: now},
		InitContainerStatuses: []corev1.ContainerStatus{{Name: "istio-validation", Image: "proxy", ImageID: "x",
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 126, Reason: "Error"}},
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}},
	})
	// A validator that failed once and then passed is fine.
	pod(t, env, ns, "istio-recovered", "early", nil, istio, corev1.PodStatus{
		StartTime: &metav1.Time{Time: now},
		InitContainerStatuses: []corev1.ContainerStatus{{Name: "istio-validation", Image: "proxy", ImageID: "x",
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 126}},
			State:                corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}}},
	})
	// A finished pod runs no traffic.
	pod(t, env, ns, "finished", "late", nil, linkerd, corev1.PodStatus{Phase: corev1.PodSucceeded, StartTime: &metav1.Time{Time: now}})

	r = runOne(t, env, NoRepairCandidates, opts)
	wantStatus(t, r, Fail,
		"pod "+ns+"/istio-failed on early: init container istio-validation exited 126 (istio-validation: redirect missing)", late)
	if r.Message != "1 pod(s) run without redirection (their validator says so), 1 more started before their node was ready" {
		t.Errorf("message %q", r.Message)
	}
}
