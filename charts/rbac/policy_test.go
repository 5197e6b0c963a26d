package rbac

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/mesh-cni/mesh-cni/internal/agent"
	"github.com/mesh-cni/mesh-cni/internal/agent/kubeconfig"
	"github.com/mesh-cni/mesh-cni/internal/agent/repair"
	"github.com/mesh-cni/mesh-cni/internal/agent/taint"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// The agent's Event components, as the chart's policy lists them.
const agentComponent = "mesh-cni-agent" // installer.EventComponent

const apiAudience = "https://kubernetes.default.svc.cluster.local"

// writes records every write tried with the agent's token and the API
// server's answer, for the table in docs/permissions.md.
type writes struct {
	t    *testing.T
	rows []string
}

// try asserts the API server's answer to one write: allowed (nil error)
// or refused (Forbidden by RBAC or the admission policy, Invalid by the
// API server's own validation).
func (w *writes) try(resource, verb, field, node string, allow bool, err error) {
	w.t.Helper()
	answer := "allowed"
	if err != nil {
		answer = "refused"
		if strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
			answer = "refused (policy)"
		} else if apierrors.IsInvalid(err) {
			answer = "refused (validation)"
		} else if strings.Contains(err.Error(), "cannot ") {
			answer = "refused (RBAC)"
		}
	}
	w.rows = append(w.rows, fmt.Sprintf("| %s | %s | %s | %s | %s |", resource, verb, field, node, answer))
	switch {
	case allow && err != nil:
		w.t.Errorf("%s %s %s (%s): want allowed, got %v", verb, resource, field, node, err)
	case !allow && err == nil:
		w.t.Errorf("%s %s %s (%s): want refused, got allowed", verb, resource, field, node)
	case !allow && !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err):
		w.t.Errorf("%s %s %s (%s): want Forbidden, got %v", verb, resource, field, node, err)
	}
}

// log prints the rows, each of which docs/permissions.md must hold.
func (w *writes) log() {
	w.t.Helper()
	w.t.Logf("writes with the agent's token:\n| resource | verb | field | node | API server |\n|---|---|---|---|---|\n%s", strings.Join(w.rows, "\n"))
	b, err := os.ReadFile("../../docs/permissions.md")
	if err != nil {
		w.t.Fatal(err)
	}
	doc := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		doc[l] = true
	}
	for _, r := range w.rows {
		if !doc[r] {
			w.t.Errorf("docs/permissions.md (writes tried with the agent's token) lacks the row\n%s", r)
		}
	}
}

// policyRig is the chart (repair label, startup taint, the API server's
// audience) installed as release, and the agent's client, bound to its pod
// on node own; other is a second node.
type policyRig struct {
	env             *testenv.Env
	c               kubernetes.Interface
	release, ns, sa string
	apps            string
	own, other      string
	agentPod        *corev1.Pod
}

func policyEnv(t *testing.T, release string) *policyRig {
	r := &policyRig{env: testenv.Start(t), release: release, own: release + "-own", other: release + "-other"}
	ctx := context.Background()
	r.ns = r.env.Namespace(t, "mesh-cni")
	r.env.Node(t, r.own, corev1.Taint{Key: "mesh-cni.io/not-ready", Effect: corev1.TaintEffectNoSchedule},
		corev1.Taint{Key: "other", Effect: corev1.TaintEffectNoSchedule})
	r.env.Node(t, r.other)
	r.sa, _ = install(t, r.env, release, r.ns, map[string]any{
		"repair":        map[string]any{"enabled": true, "policy": "label"},
		"startupTaint":  map[string]any{"enabled": true},
		"ownNodePolicy": map[string]any{"tokenAudiences": []any{apiAudience}},
	})
	r.c = agentClient(t, r.env, r.ns, r.sa, r.own)
	var err error
	r.agentPod, err = r.env.Client.CoreV1().Pods(r.ns).Get(ctx, "mesh-cni-agent-"+r.own, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r.apps = r.env.Namespace(t, "apps")
	annotate := []byte(`{"metadata":{"annotations":{"mesh-cni.io/agent-status":"{}"}}}`)
	eventuallyErr(t, "own-node policy active", func() bool {
		_, err = r.c.CoreV1().Nodes().Patch(ctx, r.other, types.MergePatchType, annotate, metav1.PatchOptions{})
		return err != nil
	}, &err)
	return r
}

// On its own Node the agent changes its status annotation and removes the
// startup taint; nothing else of the Node's metadata, spec or status.
func TestPolicyNodeFields(t *testing.T) {
	r := policyEnv(t, "pol-node")
	c, own, other := r.c, r.own, r.other
	ctx := context.Background()
	w := &writes{t: t}
	defer w.log()
	patch := func(node, p string) error {
		_, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(p), metav1.PatchOptions{})
		return err
	}
	w.try("nodes", "patch", "annotation mesh-cni.io/agent-status", "own", true,
		patch(own, `{"metadata":{"annotations":{"mesh-cni.io/agent-status":"{\"ready\":true}"}}}`))
	w.try("nodes", "patch", "annotation mesh-cni.io/agent-status", "other", false,
		patch(other, `{"metadata":{"annotations":{"mesh-cni.io/agent-status":"{}"}}}`))
	for _, tc := range []struct{ field, patch string }{
		{"label", `{"metadata":{"labels":{"x":"y"}}}`},
		{"other annotation", `{"metadata":{"annotations":{"x":"y"}}}`},
		{"finalizers", `{"metadata":{"finalizers":["example.com/hold"]}}`},
		{"ownerReferences (missing owner: garbage-collected)", `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"gone","uid":"6f1c1f9e-0000-4000-8000-000000000000"}]}}`},
		{"spec.providerID", `{"spec":{"providerID":"evil://x"}}`},
		{"spec.podCIDR", `{"spec":{"podCIDR":"10.9.0.0/24","podCIDRs":["10.9.0.0/24"]}}`},
		{"spec.unschedulable (cordon)", `{"spec":{"unschedulable":true}}`},
		{"spec.taints: add one", `{"spec":{"taints":[{"key":"mesh-cni.io/not-ready","effect":"NoSchedule"},{"key":"other","effect":"NoSchedule"},{"key":"new","effect":"NoExecute"}]}}`},
		{"spec.taints: remove another", `{"spec":{"taints":[{"key":"mesh-cni.io/not-ready","effect":"NoSchedule"}]}}`},
	} {
		w.try("nodes", "patch", tc.field, "own", false, patch(own, tc.patch))
	}
	w.try("nodes", "patch", "spec.taints: remove the startup taint (internal/agent/taint)", "own", true,
		taint.Remove(ctx, c.CoreV1(), own, "mesh-cni.io/not-ready"))
	_, err := c.CoreV1().Nodes().Patch(ctx, own, types.MergePatchType,
		[]byte(`{"status":{"conditions":[{"type":"Ready","status":"False","reason":"x","lastHeartbeatTime":null,"lastTransitionTime":null}]}}`), metav1.PatchOptions{}, "status")
	w.try("nodes/status", "patch", "status.conditions Ready", "own", false, err)
}

// Through pods/status the agent adds the repair label to a pod on its node
// and changes nothing else.
func TestPolicyPodStatus(t *testing.T) {
	r := policyEnv(t, "pol-pod")
	env, c, apps, own, other := r.env, r.c, r.apps, r.own, r.other
	ctx := context.Background()
	w := &writes{t: t}
	defer w.log()
	brokenPod(t, env, apps, "mine", own)
	brokenPod(t, env, apps, "theirs", other)
	p, err := env.Client.CoreV1().Pods(apps).Patch(ctx, "mine", types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"web"}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	status := func(pod, patch string) error {
		_, err := c.CoreV1().Pods(apps).Patch(ctx, pod, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
		return err
	}
	k, v, _ := strings.Cut(repair.DefaultLabel, "=")
	label := fmt.Sprintf(`{"metadata":{"uid":%q,"labels":{%q:%q}}}`, p.UID, k, v)
	w.try("pods/status", "patch", "repair label "+repair.DefaultLabel, "other", false, status("theirs", fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, k, v)))
	for _, tc := range []struct{ field, patch string }{
		{"label app=payments (Service selector)", `{"metadata":{"labels":{"app":"payments"}}}`},
		{"label removed", `{"metadata":{"labels":{"app":null}}}`},
		{"repair label with another value", fmt.Sprintf(`{"metadata":{"labels":{%q:"false"}}}`, k)},
		{"repair label and another label", fmt.Sprintf(`{"metadata":{"labels":{%q:%q,"x":"y"}}}`, k, v)},
		{"annotation", `{"metadata":{"annotations":{"x":"y"}}}`},
		{"finalizers", `{"metadata":{"finalizers":["example.com/hold"]}}`},
		{"status.conditions Ready=True", `{"status":{"conditions":[{"type":"Ready","status":"True"}]}}`},
		{"status.podIP", `{"status":{"podIP":"10.0.0.9","podIPs":[{"ip":"10.0.0.9"}]}}`},
	} {
		w.try("pods/status", "patch", tc.field, "own", false, status("mine", tc.patch))
	}
	w.try("pods/status", "patch", "repair label "+repair.DefaultLabel+" (internal/agent/repair's patch)", "own", true, status("mine", label))
	// And the real controller does it.
	brokenPod(t, env, apps, "web", own)
	outc := make(chan repair.Outcome, 10)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- repair.Run(rctx, c.CoreV1(), repair.Options{NodeName: own, Policy: repair.Label,
			OnAttempt: func(_ repair.Policy, o repair.Outcome) { outc <- o }})
	}()
	defer func() { cancel(); <-done }()
	select {
	case o := <-outc:
		if o != repair.Repaired {
			t.Errorf("repair label as the agent: %s", o)
		}
	case <-time.After(testenv.Timeout()):
		t.Fatalf("no repair within %v", testenv.Timeout())
	}
}

// Events only as mesh-cni, from the agent's own node, about its Node or a
// pod in the Event's namespace; only its own Events are updated.
func TestPolicyEvents(t *testing.T) {
	r := policyEnv(t, "pol-ev")
	env, c, apps, own, other := r.env, r.c, r.apps, r.own, r.other
	ctx := context.Background()
	w := &writes{t: t}
	defer w.log()
	brokenPod(t, env, apps, "web", own)
	ev := func(ns string, obj corev1.ObjectReference, component, host string) *corev1.Event {
		return &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{GenerateName: "x-", Namespace: ns},
			InvolvedObject: obj, Reason: "Test", Message: "m", Type: corev1.EventTypeWarning,
			Source:            corev1.EventSource{Component: component, Host: host},
			ReportingInstance: host, ReportingController: component,
			FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1,
		}
	}
	node := func(n string) corev1.ObjectReference {
		return corev1.ObjectReference{Kind: "Node", Name: n, UID: types.UID(n)}
	}
	pod := corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: apps, Name: "web"}
	create := func(e *corev1.Event) error {
		_, err := c.CoreV1().Events(e.Namespace).Create(ctx, e, metav1.CreateOptions{})
		return err
	}

	// The agent's own recorders (installer nodeWarner, internal/agent/repair): create,
	// then a repeat patches the count.
	b := record.NewBroadcaster(record.WithContext(ctx))
	defer b.Shutdown()
	sink := &errSink{EventSinkImpl: corev1client.EventSinkImpl{Interface: c.CoreV1().Events("")}}
	b.StartRecordingToSink(sink)
	rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: agentComponent, Host: own})
	ref := node(own)
	rec.Event(&ref, corev1.EventTypeWarning, "RefusedSetting", "m")
	rec.Event(&pod, corev1.EventTypeWarning, "AddFailed", "m")
	testenv.EventuallyTrue(t, "the agent's Events written", func() bool { return countEvents(env, "default", "RefusedSetting") == 1 })
	rec.Event(&ref, corev1.EventTypeWarning, "RefusedSetting", "m")
	testenv.EventuallyTrue(t, "the repeat patched", func() bool { return countEvents(env, "default", "RefusedSetting") == 2 })
	sink.mu.Lock()
	for _, err := range sink.errs {
		t.Errorf("the agent's recorder: %v", err)
	}
	sink.mu.Unlock()
	// The agent's recorder (events.k8s.io/v1, internal/agent), as the installer
	// runs it: about its Node and about a pod.
	rctx, stopRec := context.WithCancel(ctx)
	defer stopRec()
	arec, err := agent.NewEventRecorder(rctx, c.EventsV1(), own)
	if err != nil {
		t.Fatal(err)
	}
	arec.Eventf(&ref, nil, corev1.EventTypeNormal, "PolicyReady", "Ready", "m")
	arec.Eventf(&pod, nil, corev1.EventTypeWarning, "PolicyAddFailed", "Add", "m")
	testenv.EventuallyTrue(t, "the agent's events.k8s.io Events written", func() bool {
		return countV1Events(env, "default", "PolicyReady") == 1 && countV1Events(env, apps, "PolicyAddFailed") == 1
	})
	w.try("events.k8s.io/events", "create", "own Node, reportingController mesh-cni-agent (internal/agent recorder)", "own", true, nil)
	w.try("events.k8s.io/events", "create", "pod on its node, reportingController mesh-cni-agent (internal/agent recorder)", "own", true, nil)
	w.try("events", "create", "own Node, source mesh-cni-agent (record.EventRecorder)", "own", true, nil)
	w.try("events", "patch", "count of its Event (record.EventRecorder)", "own", true, nil)
	w.try("events", "create", "pod in its namespace, source "+repair.EventComponent, "own", true, create(ev(apps, pod, repair.EventComponent, own)))

	for _, tc := range []struct {
		field, node string
		e           *corev1.Event
	}{
		{"source kubelet (spoofed) about its Node", "own", ev("default", node(own), "kubelet", own)},
		{"reportingComponent kubelet, source mesh-cni-agent", "own", func() *corev1.Event {
			e := ev("default", node(own), agentComponent, own)
			e.ReportingController = "kubelet"
			return e
		}()},
		{"about another Node", "other", ev("default", node(other), agentComponent, own)},
		{"source.host another node", "other", ev("default", node(other), agentComponent, other)},
		{"pod Event in another namespace than the pod's", "own", ev("default", corev1.ObjectReference{Kind: "Pod", Namespace: apps, Name: "web"}, agentComponent, own)},
		{"about a Secret", "own", ev(apps, corev1.ObjectReference{Kind: "Secret", Namespace: apps, Name: "s"}, agentComponent, own)},
		{"no source", "own", ev(apps, pod, "", "")},
	} {
		w.try("events", "create", tc.field, tc.node, false, create(tc.e))
	}

	// events.k8s.io/v1
	ev1 := func(controller, instance string, regarding corev1.ObjectReference) error {
		_, err := c.EventsV1().Events(apps).Create(ctx, &eventsv1.Event{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "x-"}, EventTime: metav1.NowMicro(),
			ReportingController: controller, ReportingInstance: instance, Action: "Repair", Reason: "Test", Type: "Warning",
			Regarding: regarding,
		}, metav1.CreateOptions{})
		return err
	}
	w.try("events.k8s.io/events", "create", "pod, reportingController "+repair.EventComponent, "own", true, ev1(repair.EventComponent, own, pod))
	w.try("events.k8s.io/events", "create", "pod, reportingController kubelet", "own", false, ev1("kubelet", own, pod))
	w.try("events.k8s.io/events", "create", "pod, reportingInstance another node", "other", false, ev1(repair.EventComponent, other, pod))

	// Rewriting others' Events: one by the kubelet, one by the agent of
	// another node; and its own, pointed elsewhere.
	for _, tc := range []struct{ field, node, component, host string }{
		{"message of a kubelet Event", "own", "kubelet", own},
		{"message of another node's mesh-cni Event", "other", agentComponent, other},
	} {
		theirs, err := env.Client.CoreV1().Events(apps).Create(ctx, ev(apps, pod, tc.component, tc.host), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.CoreV1().Events(apps).Patch(ctx, theirs.Name, types.MergePatchType, []byte(`{"message":"all good"}`), metav1.PatchOptions{})
		w.try("events", "patch", tc.field, tc.node, false, err)
	}
	mine, err := c.CoreV1().Events(apps).Create(ctx, ev(apps, pod, agentComponent, own), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.CoreV1().Events(apps).Patch(ctx, mine.Name, types.MergePatchType, []byte(`{"involvedObject":{"name":"other"}}`), metav1.PatchOptions{})
	w.try("events", "patch", "involvedObject of its own Event", "own", false, err)
	_, err = c.CoreV1().Events(apps).Patch(ctx, mine.Name, types.MergePatchType, []byte(`{"count":2}`), metav1.PatchOptions{})
	w.try("events", "patch", "count of its own Event", "own", true, err)
}

// errSink records the recorder's failed writes (it only logs them).
type errSink struct {
	corev1client.EventSinkImpl
	mu   sync.Mutex
	errs []error
}

func (s *errSink) note(err error) {
	if err != nil {
		s.mu.Lock()
		s.errs = append(s.errs, err)
		s.mu.Unlock()
	}
}

func (s *errSink) Create(e *corev1.Event) (*corev1.Event, error) {
	r, err := s.EventSinkImpl.Create(e)
	s.note(err)
	return r, err
}

func (s *errSink) Patch(e *corev1.Event, p []byte) (*corev1.Event, error) {
	r, err := s.EventSinkImpl.Patch(e, p)
	s.note(err)
	return r, err
}

// countV1Events counts the events.k8s.io Events of a reason in ns.
func countV1Events(env *testenv.Env, ns, reason string) int {
	l, err := env.Client.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range l.Items {
		if e.Reason == reason {
			n++
		}
	}
	return n
}

func countEvents(env *testenv.Env, ns, reason string) int32 {
	l, err := env.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return 0
	}
	var n int32
	for _, e := range l.Items {
		if e.Reason == reason {
			n += e.Count
		}
	}
	return n
}

// TokenRequests only for the plugin's account, for at most an hour, for
// the API server's audience, bound to the agent's own pod.
func TestPolicyTokenRequests(t *testing.T) {
	r := policyEnv(t, "pol-tok")
	env, c, ns := r.env, r.c, r.ns
	ctx := context.Background()
	w := &writes{t: t}
	defer w.log()
	plugin := r.sa + "-plugin"
	req := &kubeconfig.TokenRequester{Client: c.CoreV1(), Namespace: ns, Name: plugin, Node: r.own}
	_, err := req.Token()
	w.try("serviceaccounts/token", "create", "plugin's account, 3600 s, bound to its Node (kubeconfig.TokenRequester)", "own", true, err)

	otherNode, err := env.Client.CoreV1().Nodes().Get(ctx, r.other, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bound := &authv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: r.own}
	hour, tenYears := int64(3600), int64(10*365*24*3600)
	token := func(sa string, spec authv1.TokenRequestSpec) error {
		_, err := c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
		return err
	}
	for _, tc := range []struct {
		field, node string
		sa          string
		spec        authv1.TokenRequestSpec
	}{
		{"not bound", "own", plugin, authv1.TokenRequestSpec{ExpirationSeconds: &hour}},
		{"bound to another Node", "other", plugin, authv1.TokenRequestSpec{ExpirationSeconds: &hour,
			BoundObjectRef: &authv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: otherNode.Name, UID: otherNode.UID}}},
		{"bound to its Node's name with another Node's UID", "own", plugin, authv1.TokenRequestSpec{ExpirationSeconds: &hour,
			BoundObjectRef: &authv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: r.own, UID: otherNode.UID}}},
		{"bound to the agent's pod (another account's pod)", "own", plugin, authv1.TokenRequestSpec{ExpirationSeconds: &hour,
			BoundObjectRef: &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: r.agentPod.Name, UID: r.agentPod.UID}}},
		{"bound to a Secret", "own", plugin, authv1.TokenRequestSpec{ExpirationSeconds: &hour,
			BoundObjectRef: &authv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: "s"}}},
		{"expirationSeconds 10 years", "own", plugin, authv1.TokenRequestSpec{ExpirationSeconds: &tenYears, BoundObjectRef: bound}},
		{"expirationSeconds 3601", "own", plugin, authv1.TokenRequestSpec{ExpirationSeconds: func() *int64 { s := int64(3601); return &s }(), BoundObjectRef: bound}},
		{"audience \"anything\"", "own", plugin, authv1.TokenRequestSpec{ExpirationSeconds: &hour, BoundObjectRef: bound, Audiences: []string{"anything"}}},
		{"the API server's audience and \"anything\"", "own", plugin, authv1.TokenRequestSpec{ExpirationSeconds: &hour, BoundObjectRef: bound, Audiences: []string{apiAudience, "anything"}}},
		{"the agent's own account", "own", r.sa, authv1.TokenRequestSpec{ExpirationSeconds: &hour, BoundObjectRef: bound}},
		{"the namespace's default account", "own", "default", authv1.TokenRequestSpec{ExpirationSeconds: &hour, BoundObjectRef: bound}},
	} {
		w.try("serviceaccounts/token", "create", tc.field, tc.node, false, token(tc.sa, tc.spec))
	}
	w.try("serviceaccounts/token", "create", "plugin's account, the API server's audience, 600 s, bound to its Node", "own", true,
		token(plugin, authv1.TokenRequestSpec{ExpirationSeconds: func() *int64 { s := int64(600); return &s }(), BoundObjectRef: bound, Audiences: []string{apiAudience}}))
}

// Rendered for Kubernetes 1.30, where the API server cannot bind a token to
// a Node, the policy lets the plugin's tokens be unbound, and still refuses
// those bound to another Node and the rest.
func TestPolicyTokenRequestsBefore131(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	ns := env.Namespace(t, "mesh-cni")
	own, other := "pol130-own", "pol130-other"
	env.Node(t, own)
	env.Node(t, other)
	sa, _, _ := installFor(t, env, "v1.30.0", "pol130", ns, map[string]any{})
	c := agentClient(t, env, ns, sa, own)
	plugin := sa + "-plugin"
	hour, tenYears := int64(3600), int64(10*365*24*3600)
	token := func(spec authv1.TokenRequestSpec) error {
		_, err := c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, plugin, &authv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
		return err
	}
	var err error
	eventuallyErr(t, "own-node policy active", func() bool {
		err = token(authv1.TokenRequestSpec{ExpirationSeconds: &tenYears})
		return err != nil
	}, &err)
	w := &writes{t: t}
	for _, tc := range []struct {
		field, node string
		spec        authv1.TokenRequestSpec
		allow       bool
	}{
		{"unbound", "own", authv1.TokenRequestSpec{ExpirationSeconds: &hour}, true},
		{"bound to its Node", "own", authv1.TokenRequestSpec{ExpirationSeconds: &hour, BoundObjectRef: &authv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: own}}, true},
		{"bound to another Node", "other", authv1.TokenRequestSpec{ExpirationSeconds: &hour, BoundObjectRef: &authv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: other}}, false},
		{"unbound, 10 years", "own", authv1.TokenRequestSpec{ExpirationSeconds: &tenYears}, false},
	} {
		w.try("serviceaccounts/token", "create", tc.field, tc.node, tc.allow, token(tc.spec))
	}
	w.t.Logf("rendered for v1.30.0:\n%s", strings.Join(w.rows, "\n"))
}
