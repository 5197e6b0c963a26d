package repair

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func terminated(code int32) *corev1.ContainerStateTerminated {
	return &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Error"}
}

func TestBroken(t *testing.T) {
	now := metav1.Now()
	for _, tc := range []struct {
		name      string
		status    corev1.ContainerStatus
		deleting  bool
		evicting  bool
		want      bool
		container string
	}{
		{name: "istio failed, in back-off", want: true, container: "istio-validation", status: corev1.ContainerStatus{
			Name:                 "istio-validation",
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: terminated(126)},
		}},
		{name: "linkerd failed, current state", want: true, container: "linkerd-network-validator", status: corev1.ContainerStatus{
			Name:  "linkerd-network-validator",
			State: corev1.ContainerState{Terminated: terminated(95)},
		}},
		{name: "ours failed, restarted and running", want: true, container: "mesh-cni-validator", status: corev1.ContainerStatus{
			Name:                 "mesh-cni-validator",
			State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
			LastTerminationState: corev1.ContainerState{Terminated: terminated(97)},
		}},
		{name: "failed before, passed now", status: corev1.ContainerStatus{
			Name:                 "mesh-cni-validator",
			State:                corev1.ContainerState{Terminated: terminated(0)},
			LastTerminationState: corev1.ContainerState{Terminated: terminated(97)},
		}},
		{name: "other exit code", status: corev1.ContainerStatus{
			Name:  "mesh-cni-validator",
			State: corev1.ContainerState{Terminated: terminated(2)},
		}},
		{name: "right code, other container", status: corev1.ContainerStatus{
			Name:  "app-init",
			State: corev1.ContainerState{Terminated: terminated(97)},
		}},
		{name: "linkerd code on istio's validator", status: corev1.ContainerStatus{
			Name:  "istio-validation",
			State: corev1.ContainerState{Terminated: terminated(95)},
		}},
		{name: "being deleted", deleting: true, status: corev1.ContainerStatus{
			Name:  "istio-validation",
			State: corev1.ContainerState{Terminated: terminated(126)},
		}},
		{name: "being evicted", evicting: true, status: corev1.ContainerStatus{
			Name:  "istio-validation",
			State: corev1.ContainerState{Terminated: terminated(126)},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{Status: corev1.PodStatus{InitContainerStatuses: []corev1.ContainerStatus{
				{Name: "first", State: corev1.ContainerState{Terminated: terminated(0)}},
				tc.status,
			}}}
			if tc.deleting {
				pod.DeletionTimestamp = &now
			}
			if tc.evicting {
				pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}
			}
			v, term, got := Broken(pod, DefaultValidators())
			if got != tc.want {
				t.Fatalf("Broken = %v, want %v", got, tc.want)
			}
			if got && (v.Container != tc.container || term == nil || term.ExitCode != v.ExitCode) {
				t.Fatalf("validator %+v, termination %+v", v, term)
			}
		})
	}
}

func TestOptions(t *testing.T) {
	for _, o := range []Options{
		{},
		{NodeName: "n", Policy: "force"},
		{NodeName: "n", Policy: Label, Label: "novalue"},
		{NodeName: "n", Policy: Label, Label: "bad key!=x"},
		{NodeName: "n", Policy: Label, Label: "k=bad value"},
	} {
		if err := o.defaults(); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
	o := Options{NodeName: "n"}
	if err := o.defaults(); err != nil {
		t.Fatal(err)
	}
	if o.Policy != Evict || o.Label != DefaultLabel || len(o.Validators) != 3 || o.RetryBase <= 0 || o.ActionsPerSecond <= 0 {
		t.Fatalf("defaults not applied: %+v", o)
	}
}
