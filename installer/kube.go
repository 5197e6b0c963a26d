package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"

	"github.com/mesh-cni/mesh-cni/internal/agent"
	"github.com/mesh-cni/mesh-cni/internal/agent/kubeconfig"
	"github.com/mesh-cni/mesh-cni/internal/node"
	"github.com/mesh-cni/mesh-cni/internal/version"
)

// clients are the typed clients of the API groups the agent uses,
// instead of the full clientset: linking every group's client costs the
// agent several MiB of RSS (docs/benchmarks.md).
type clients struct {
	core   corev1client.CoreV1Interface // requests, each bounded by restConfig's Timeout
	pods   corev1client.PodsGetter      // the node's pod informer: a long-running watch
	apps   appsv1client.AppsV1Interface // the DaemonSet probe's watch and the lookups at stop
	events eventsv1client.EventsV1Interface
}

// newClients builds them from the pod's service account, reading the token
// file on every refresh so rotation needs nothing from us.
func newClients(o kubeconfig.Options) (*clients, error) {
	return clientsFor(restConfig(o))
}

// clientsFor builds them on one transport (one connection pool, one token
// source). A watch is a request whose answer lasts until the API server
// ends it (after its min-request-timeout, 30 to 60 min) or we do, and an
// http.Client's Timeout covers reading the whole answer: with it, every
// watch was cut after rc.Timeout and opened again, and the DaemonSet
// probe was blind between the two, which is when an uninstall could be
// missed. So watches go through a client without that Timeout; their
// other calls (the probe's lookups, the rollout checks) carry their own
// deadlines.
func clientsFor(rc *rest.Config) (*clients, error) {
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, err
	}
	watching := &http.Client{Transport: hc.Transport}
	core, err := corev1client.NewForConfigAndClient(rc, hc)
	if err != nil {
		return nil, err
	}
	pods, err := corev1client.NewForConfigAndClient(rc, watching)
	if err != nil {
		return nil, err
	}
	apps, err := appsv1client.NewForConfigAndClient(rc, watching)
	if err != nil {
		return nil, err
	}
	ev, err := eventsv1client.NewForConfigAndClient(rc, hc)
	if err != nil {
		return nil, err
	}
	return &clients{core: core, pods: pods, apps: apps, events: ev}, nil
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
	agent.ReasonOtherMesh: "Chain",
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
