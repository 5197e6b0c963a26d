package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
	"unicode/utf8"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"

	"github.com/mesh-cni/mesh-cni/internal/agent"
	"github.com/mesh-cni/mesh-cni/internal/agent/kubeconfig"
	"github.com/mesh-cni/mesh-cni/internal/node"
	"github.com/mesh-cni/mesh-cni/internal/retry"
	"github.com/mesh-cni/mesh-cni/internal/version"
)

// clients are the typed clients of the API groups the agent uses,
// instead of the full clientset: linking every group's client costs the
// agent several MiB of RSS (docs/benchmarks.md).
type clients struct {
	core   corev1client.CoreV1Interface
	apps   appsv1client.AppsV1Interface // the DaemonSet lookup at stop
	events eventsv1client.EventsV1Interface
}

// newClients builds them from the pod's service account, reading the token
// file on every refresh so rotation needs nothing from us.
func newClients(o kubeconfig.Options) (*clients, error) {
	rc := restConfig(o)
	// One HTTP client (one connection pool, one token source) for both.
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, err
	}
	core, err := corev1client.NewForConfigAndClient(rc, hc)
	if err != nil {
		return nil, err
	}
	apps, err := appsv1client.NewForConfigAndClient(rc, hc)
	if err != nil {
		return nil, err
	}
	ev, err := eventsv1client.NewForConfigAndClient(rc, hc)
	if err != nil {
		return nil, err
	}
	return &clients{core: core, apps: apps, events: ev}, nil
}

// restConfig reaches the API server as the pod's service account.
func restConfig(o kubeconfig.Options) *rest.Config {
	return &rest.Config{
		Host:            o.Server(),
		BearerTokenFile: o.TokenPath,
		TLSClientConfig: rest.TLSClientConfig{CAFile: o.CAPath},
		UserAgent:       "mesh-cni-agent/" + version.Version,
		Timeout:         30 * time.Second,
	}
}

// publisher patches the status annotation onto this node.
func publisher(client corev1client.NodesGetter, nodeName string) func(context.Context, agent.Status) error {
	if client == nil || nodeName == "" {
		return nil
	}
	return func(ctx context.Context, st agent.Status) error {
		b, err := json.Marshal(st)
		if err != nil {
			return err
		}
		return patchAnnotation(ctx, client, nodeName, string(b))
	}
}

// publishedStatus reads the status an earlier run left on this node.
func publishedStatus(client corev1client.NodesGetter, nodeName string) func(context.Context) (*agent.Status, error) {
	if client == nil || nodeName == "" {
		return nil
	}
	return func(ctx context.Context) (*agent.Status, error) {
		n, err := client.Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("get node %s: %w", nodeName, err)
		}
		raw, ok := n.Annotations[agent.StatusAnnotation]
		if !ok {
			return nil, nil
		}
		var st agent.Status
		if err := json.Unmarshal([]byte(raw), &st); err != nil {
			return nil, fmt.Errorf("node %s annotation %s: %w", nodeName, agent.StatusAnnotation, err)
		}
		return &st, nil
	}
}

func patchAnnotation(ctx context.Context, client corev1client.NodesGetter, nodeName string, value any) error {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{agent.StatusAnnotation: value}},
	})
	if err != nil {
		return err
	}
	_, err = client.Nodes().Patch(ctx, nodeName, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("patch node %s: %w", nodeName, err)
	}
	return nil
}

// clearStatus removes the annotation after an uninstall.
func clearStatus(ctx context.Context, client corev1client.NodesGetter, nodeName string) error {
	if nodeName == "" {
		return nil
	}
	return patchAnnotation(ctx, client, nodeName, nil)
}

// dsProbe watches the agent's DaemonSet while the release is installed and
// remembers whether the API server said it was deleted (gone, or carrying
// a deletion timestamp). helm uninstall deletes the DaemonSet, then the
// ServiceAccount and bindings, without waiting for the pods: by SIGTERM the
// lookup may be refused, but the watch, opened while access worked, has
// already seen the delete.
type dsProbe struct {
	daemonSets appsv1client.DaemonSetsGetter
	namespace  string
	name       string
	log        *slog.Logger
	backoff    wait.Backoff // zero: retry.Backoff(time.Minute)
	allowed    atomic.Bool  // a GET was answered once
	deleted    atomic.Bool  // the last word of the API server: deleted
	watching   atomic.Bool  // a watch is open
}

// stopWatchWait bounds how long the decision at stop waits for an open
// watch to deliver a deletion (deletedWithin).
const stopWatchWait = 5 * time.Second

// startProbe runs a DaemonSet probe until stop is called. It outlives ctx's
// cancellation on purpose: SIGTERM cancels ctx, and the decision that
// follows still needs the watch (deletedWithin).
func startProbe(ctx context.Context, daemonSets appsv1client.DaemonSetsGetter, cfg *config, log *slog.Logger) (p *dsProbe, stop func()) {
	p = &dsProbe{daemonSets: daemonSets, namespace: cfg.namespace, name: cfg.daemonSetName, log: log}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); p.run(pctx) }()
	return p, func() { cancel(); <-done }
}

// deletedWithin says whether the API server said the DaemonSet was
// deleted, waiting up to d while a watch is open. helm uninstall deletes
// the DaemonSet and then the agent's RBAC; on a loaded node SIGTERM can
// come before the agent has read the deletion off its watch, and the
// lookup at stop is then refused. The watch, opened while access worked,
// still delivers it.
func (p *dsProbe) deletedWithin(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for !p.deleted.Load() && p.watching.Load() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	return p.deleted.Load()
}

// run GETs the DaemonSet and watches it from there, again after every
// closed watch, backing off on p.backoff (zero: up to a minute, jittered)
// while the API does not answer.
func (p *dsProbe) run(ctx context.Context) {
	b := p.backoff
	if b == (wait.Backoff{}) {
		b = retry.Backoff(time.Minute)
	}
	next := b.DelayFunc()
	for ctx.Err() == nil {
		var d time.Duration
		if rv, err := p.get(ctx); err != nil {
			d = next()
			p.log.Debug("cannot look up the DaemonSet", "err", err, "retry_in", d)
		} else if err := p.watch(ctx, rv); err != nil {
			d = next()
			p.log.Debug("cannot watch the DaemonSet", "err", err, "retry_in", d)
		} else {
			// A watch the API server ended in time: start the backoff over.
			next = b.DelayFunc()
			d = next()
		}
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
}

func (p *dsProbe) get(ctx context.Context) (string, error) {
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ds, err := p.daemonSets.DaemonSets(p.namespace).Get(gctx, p.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		p.see(true, "not found")
	case err == nil:
		p.see(ds.DeletionTimestamp != nil, "being deleted")
	default:
		return "", err
	}
	if !p.allowed.Swap(true) {
		p.log.Info("DaemonSet lookup allowed; watching it for a deletion", "daemonset", p.namespace+"/"+p.name)
	}
	if ds == nil {
		return "", nil
	}
	return ds.ResourceVersion, nil
}

func (p *dsProbe) watch(ctx context.Context, rv string) error {
	w, err := p.daemonSets.DaemonSets(p.namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector:   "metadata.name=" + p.name,
		ResourceVersion: rv,
	})
	if err != nil {
		return err
	}
	defer w.Stop()
	p.watching.Store(true)
	defer p.watching.Store(false)
	for ev := range w.ResultChan() {
		switch ev.Type {
		case watch.Deleted:
			p.see(true, "deleted")
		case watch.Added, watch.Modified:
			if ds, ok := ev.Object.(*appsv1.DaemonSet); ok {
				p.see(ds.DeletionTimestamp != nil, "being deleted")
			}
		case watch.Error:
			return apierrors.FromObject(ev.Object)
		}
	}
	return nil
}

func (p *dsProbe) see(deleted bool, how string) {
	if p.deleted.Swap(deleted) != deleted && deleted {
		p.log.Info("the DaemonSet was deleted; uninstalling at stop", "daemonset", p.namespace+"/"+p.name, "how", how)
	}
}

// shouldUninstall decides what a stop means. In auto mode the release is
// being removed only when the API server says so: the DaemonSet is gone
// (404) or being deleted, at stop or, when the lookup at stop fails, as
// seen by the watch (seenDeleted, asked only then). A rolling update, drain or restart keeps
// everything in place so no pod starts unmeshed, and so does any doubt:
// 401, 403 (an RBAC change during a rollout), 5xx, timeouts, no API.
func shouldUninstall(daemonSets appsv1client.DaemonSetsGetter, cfg *config, seenDeleted func() bool) (bool, string) {
	switch cfg.uninstallMode {
	case "always":
		return true, "uninstall-mode=always"
	case "never":
		return false, "uninstall-mode=never"
	}
	if daemonSets == nil || cfg.namespace == "" {
		return false, "cannot look up the DaemonSet (no API access or namespace)"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ds, err := daemonSets.DaemonSets(cfg.namespace).Get(ctx, cfg.daemonSetName, metav1.GetOptions{})
	if err != nil {
		return decide(err, seenDeleted, cfg.namespace+"/"+cfg.daemonSetName)
	}
	if ds.DeletionTimestamp != nil {
		return true, fmt.Sprintf("DaemonSet %s/%s is being deleted", cfg.namespace, cfg.daemonSetName)
	}
	return false, "DaemonSet still exists (restart, upgrade or drain)"
}

// decide maps a failed DaemonSet GET to uninstall or keep.
func decide(err error, seenDeleted func() bool, ds string) (bool, string) {
	switch {
	case apierrors.IsNotFound(err):
		return true, fmt.Sprintf("DaemonSet %s is gone", ds)
	case seenDeleted():
		return true, fmt.Sprintf("DaemonSet %s was deleted (seen while it could be watched; now: %v)", ds, err)
	}
	return false, fmt.Sprintf("cannot look up the DaemonSet, keeping the chain entry: %v", err)
}

// EventComponent is the reporting controller of the agent's Events.
const EventComponent = agent.EventComponent

// maxNote is what events.k8s.io/v1 accepts in an Event's note (1 kB).
const maxNote = 1024

// recorder puts the agent's Events through events.k8s.io/v1. Two things
// bound them. The broadcaster folds repeats of one (regarding, reason,
// action, type) into an EventSeries: the first is created, the second
// patches a count of 2, and later ones only count in memory until the
// series is written every 30 minutes or closed 6 minutes after the last
// one (client-go tools/events, event_broadcaster.go recordToSink,
// finishSeries). The series keeps the first note, and distinct objects
// (a thousand failing pods) each get their own, so limit caps each
// reason across all objects as well.
type recorder struct {
	rec   events.EventRecorder
	limit *reasonLimiter
}

// eventRecorder records this agent's Events; nil without a client.
func eventRecorder(ctx context.Context, client *clients, nodeName string) *recorder {
	if client == nil || nodeName == "" {
		return nil
	}
	rec, err := agent.NewEventRecorder(ctx, client.events, nodeName)
	if err != nil {
		return nil // only a broadcaster already shut down fails here
	}
	return &recorder{rec: rec, limit: newReasonLimiter(eventBurst, eventEvery)}
}

func (r *recorder) event(ref *corev1.ObjectReference, eventType, reason, action, note string) {
	if r == nil || !r.limit.allow(reason) {
		return
	}
	r.rec.Eventf(ref, nil, eventType, reason, action, "%s", bounded(note, maxNote))
}

// bounded cuts s to at most n bytes on a rune boundary.
func bounded(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const cut = " ..."
	s = s[:n-len(cut)]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + cut
}

// nodeRef is this node as the Events' regarding object. `kubectl describe
// node` lists Events whose regarding is the Node by name with either its
// UID or its name as UID (kubelet's convention); the Node's UID is used
// when it can be read, the name otherwise. Events of a Node live in the
// "default" namespace (the recorder's choice for cluster-scoped objects).
func nodeRef(ctx context.Context, nodes corev1client.NodesGetter, nodeName string) *corev1.ObjectReference {
	ref := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: nodeName, UID: types.UID(nodeName)}
	if nodes == nil {
		return ref
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if n, err := nodes.Nodes().Get(ctx, nodeName, metav1.GetOptions{}); err == nil {
		ref.UID = n.UID
	}
	return ref
}

// nodeEvents records the agent's Events (agent.Options.Event) on this node.
func nodeEvents(r *recorder, ref *corev1.ObjectReference) func(eventType, reason, message string) {
	if r == nil {
		return nil
	}
	return func(eventType, reason, message string) {
		r.event(ref, eventType, reason, nodeAction[reason], message)
	}
}

// nodeAction is the events.k8s.io action of each reason: what the agent
// did or would not do.
var nodeAction = map[string]string{
	agent.ReasonReady:     "Chain",
	agent.ReasonRefused:   "Chain",
	agent.ReasonRechained: "Rechain",
	agent.ReasonFight:     "Rechain",
}

// podWarner puts the plugin's reports a person must see (agent.PodWarning)
// on the pod as Warning Events. `kubectl describe pod` matches Events by
// the pod's UID: the plugin passes the runtime's K8S_POD_UID, else uidOf
// (the agent's pod informer) supplies it.
func podWarner(r *recorder, uidOf func(namespace, name string) types.UID) func(node.Event) {
	if r == nil {
		return nil
	}
	return func(ev node.Event) {
		reason, msg, ok := agent.PodWarning(ev)
		if !ok {
			return
		}
		uid := types.UID(ev.PodUID)
		if uid == "" && uidOf != nil {
			uid = uidOf(ev.Namespace, ev.Pod)
		}
		ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ev.Namespace, Name: ev.Pod, UID: uid}
		action := "Add"
		if reason == agent.EventDelFailed {
			action = "Delete"
		}
		r.event(ref, corev1.EventTypeWarning, reason, action, msg)
	}
}
