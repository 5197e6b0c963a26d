package main

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestRolloutStatus(t *testing.T) {
	ds := func(gen, observed int64, desired, updated, ready int32) *appsv1.DaemonSet {
		return &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "mesh-cni", Generation: gen},
			Status: appsv1.DaemonSetStatus{ObservedGeneration: observed, DesiredNumberScheduled: desired,
				UpdatedNumberScheduled: updated, NumberReady: ready, CurrentNumberScheduled: desired},
		}
	}
	for _, tc := range []struct {
		name string
		ds   *appsv1.DaemonSet
		err  string // "" = ready
	}{
		{"all ready", ds(2, 2, 3, 3, 3), ""},
		{"one not ready", ds(2, 2, 3, 3, 2), "1 nodes have no ready agent"},
		{"rolling", ds(2, 2, 3, 1, 3), "2 nodes still run an agent of an earlier revision"},
		{"stale status", ds(3, 2, 3, 3, 3), "status is of generation 2, the spec is at 3"},
		{"no node", ds(1, 1, 0, 0, 0), "no node to run an agent on"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sum, err := rolloutStatus(tc.ds)
			if !strings.Contains(sum, "DaemonSet ns/mesh-cni: ") {
				t.Errorf("summary %q", sum)
			}
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("ready DaemonSet refused: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("got %v, want an error saying %q", err, tc.err)
			}
		})
	}
}
