package main

import (
	"context"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/mesh-cni/mesh-cni/internal/agent"
)

// TestNodeEvents runs the real agent with the chart's RBAC against a real
// kube-apiserver through ready, a storm of re-chains (a primary rewriting
// its config without our entry), the fight that storm is, and a refused
// setting. Each reason is an events.k8s.io/v1 Event regarding the Node,
// found by the query `kubectl describe node` makes, and the storm costs
// one Event object per reason, not one per re-chain.
func TestNodeEvents(t *testing.T) {
	r := newNodeRig(t)
	ctx := context.Background()
	nodeName := "events-" + r.ns
	n := r.node(t, nodeName, `{"type":"mesh-cni","backend":"nftables"}`, true)
	waitFor(t, func() bool { ok, _ := n.readyz(); return ok })
	no, err := r.env.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// The storm: the primary puts its own conflist back, as a CNI daemon
	// on a timer does, and each time the agent chains again.
	const storm = 20
	chained := func() bool {
		b, _ := os.ReadFile(n.primary)
		return strings.Contains(string(b), `"mesh-cni"`)
	}
	for i := 0; i < storm; i++ {
		os.WriteFile(n.primary+".tmp", r.orig, 0o644)
		os.Rename(n.primary+".tmp", n.primary)
		waitFor(t, chained)
	}
	os.WriteFile(n.d("cfg/.new"), []byte(`{"type":"mesh-cni","backend":"nft"}`), 0o644)
	os.Rename(n.d("cfg/.new"), n.d("cfg/plugin.json"))

	list := func() []eventsv1.Event {
		evs, err := r.env.Client.EventsV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
			"regarding.kind": "Node", "regarding.name": nodeName}.String()})
		if err != nil {
			t.Fatal(err)
		}
		return evs.Items
	}
	want := map[string]struct{ typ, note string }{
		agent.ReasonReady:     {corev1.EventTypeNormal, "is chained in " + n.primary},
		agent.ReasonRechained: {corev1.EventTypeNormal, "was rewritten without mesh-cni"},
		agent.ReasonFight:     {corev1.EventTypeWarning, "another component removed mesh-cni"},
		agent.ReasonRefused:   {corev1.EventTypeWarning, `invalid backend "nft"`},
	}
	waitFor(t, func() bool {
		seen := map[string]bool{}
		for _, e := range list() {
			if w, ok := want[e.Reason]; ok && e.Type == w.typ && strings.Contains(e.Note, w.note) {
				seen[e.Reason] = true
			}
		}
		return len(seen) == len(want)
	})
	// Repeats are written on their own goroutines: wait until the
	// re-chains show as a series (or, unfolded, as more objects).
	waitFor(t, func() bool {
		k := 0
		for _, e := range list() {
			if e.Reason == agent.ReasonRechained {
				if k++; e.Series != nil {
					return true
				}
			}
		}
		return k > 1
	})
	byReason := map[string][]eventsv1.Event{}
	for _, e := range list() {
		byReason[e.Reason] = append(byReason[e.Reason], e)
		if e.Regarding.UID != no.UID || e.Regarding.Namespace != "" || e.ReportingController != EventComponent {
			t.Errorf("%s: regarding %+v by %q, want the Node's UID %s by %s", e.Reason, e.Regarding, e.ReportingController, no.UID, EventComponent)
		}
	}
	for reason, evs := range byReason {
		count := int32(1)
		if s := evs[0].Series; s != nil {
			count = s.Count
		}
		t.Logf("%s: %d Event object(s), series count %d", reason, len(evs), count)
		if len(evs) != 1 {
			t.Errorf("%d Event objects of reason %s, want 1", len(evs), reason)
		}
		if reason == agent.ReasonRechained && (count < 2 || count >= storm) {
			t.Errorf("re-chain series count %d after %d re-chains: want the repeats folded (2 written, the rest counted in memory)", count, storm)
		}
	}

	// `kubectl describe node` lists core/v1 Events in all namespaces by
	// the Node's name, kind, empty namespace and its UID (then again with
	// the name as UID): k8s.io/kubectl pkg/describe/describe.go
	// NodeDescriber (searchEvents).
	ev := r.env.Client.CoreV1().Events("")
	name, ns, kind, uid := no.Name, "", "Node", string(no.UID)
	core, err := ev.List(ctx, metav1.ListOptions{FieldSelector: ev.GetFieldSelector(&name, &ns, &kind, &uid).String()})
	if err != nil {
		t.Fatal(err)
	}
	described := map[string]bool{}
	for _, e := range core.Items {
		described[e.Reason] = true
	}
	for reason := range want {
		if !described[reason] {
			t.Errorf("kubectl describe node would not show %s: %d Events found", reason, len(core.Items))
		}
	}
}
