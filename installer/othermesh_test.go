package main

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mesh-cni/mesh-cni/internal/agent"
	"github.com/mesh-cni/mesh-cni/internal/ctl/check"
)

// TestAgentReportsOtherMesh runs the real agent with the chart's RBAC
// against a real kube-apiserver on a node whose primary already holds
// istio-cni's entry, without migrateFrom: mesh-cni is chained after it and
// the agent stays ready, and the Node says so where it is seen: the status
// annotation names istio-cni, a Warning Event on the Node gives the fix,
// and mesh-cnictl check fails on that node.
func TestAgentReportsOtherMesh(t *testing.T) {
	r := newNodeRig(t)
	env, ctx := r.env, context.Background()
	r.orig = []byte(strings.Replace(string(r.orig), "\n\t]\n}", ",\n\t{\"type\": \"istio-cni\", \"name\": \"istio-cni\"}\n\t]\n}", 1))
	if !strings.Contains(string(r.orig), "istio-cni") {
		t.Fatal("fixture not extended")
	}
	nodeName := "both-" + r.ns
	n := r.node(t, nodeName, `{"type":"mesh-cni","backend":"nftables"}`, true)
	waitFor(t, func() bool { ok, _ := n.readyz(); return ok })
	var st *check.AgentStatus
	waitFor(t, func() bool {
		no, err := env.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false
		}
		st, err = check.ParseAgentStatus(no)
		return err == nil && st != nil && st.Ready && slices.Equal(st.Others, []string{"istio-cni"})
	})
	var note string
	waitFor(t, func() bool {
		evs, err := env.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
			"involvedObject.kind": "Node", "involvedObject.name": nodeName, "reason": agent.ReasonOtherMesh}.String()})
		if err != nil || len(evs.Items) == 0 {
			return false
		}
		if e := evs.Items[0]; e.Type == corev1.EventTypeWarning {
			note = e.Message
		}
		return note != ""
	})
	if !strings.Contains(note, "istio-cni is chained beside mesh-cni") || !strings.Contains(note, "--set migrateFrom=istio-cni") {
		t.Errorf("Event note %q", note)
	}
	// The label a kubelet sets, by which check knows a Linux node.
	if _, err := env.Client.CoreV1().Nodes().Patch(ctx, nodeName, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"kubernetes.io/os":"linux"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	r0 := check.NoOtherMeshPlugin(ctx, check.NewCluster(env.Client, check.Options{Namespace: r.ns, Version: "v-test"}))
	want := "node " + nodeName + ": istio-cni chained beside mesh-cni in " + st.Conf
	if r0.Status != check.Fail || !slices.Contains(r0.Details, want) {
		t.Errorf("check: %+v, want a failure with %q", r0, want)
	}
	if l := n.logs.String(); strings.Contains(l, "forbidden") {
		t.Errorf("the chart's RBAC forbade something:\n%s", l)
	}
}
