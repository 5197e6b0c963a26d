package repair

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/mesh-cni/mesh-cni/internal/node"
)

// Validator is an init container that checks the redirect, and the exit code
// it uses for "no redirection".
type Validator struct {
	Container string
	ExitCode  int32
}

// DefaultValidators are ours, Linkerd's network-validator and Istio's
// istio-validation.
func DefaultValidators() []Validator {
	return []Validator{
		{Container: "mesh-cni-validator", ExitCode: node.ValidatorExitCode},
		{Container: "linkerd-network-validator", ExitCode: node.LinkerdValidatorExit},
		{Container: "istio-validation", ExitCode: node.IstioValidatorExitCode},
	}
}

// Broken reports whether the pod started without redirection: one of the
// validators terminated with its exit code and has not passed since. A pod
// being deleted or evicted (DisruptionTarget condition) is never broken: it
// is already going away.
func Broken(pod *corev1.Pod, validators []Validator) (Validator, *corev1.ContainerStateTerminated, bool) {
	if pod.DeletionTimestamp != nil {
		return Validator{}, nil, false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return Validator{}, nil, false
		}
	}
	for _, st := range pod.Status.InitContainerStatuses {
		for _, v := range validators {
			if st.Name != v.Container {
				continue
			}
			if t := st.State.Terminated; t != nil {
				if t.ExitCode == 0 {
					break // passed: the pod is meshed now
				}
				if t.ExitCode == v.ExitCode {
					return v, t, true
				}
			}
			// Restarting or waiting in back-off after a failed run.
			if t := st.LastTerminationState.Terminated; t != nil && t.ExitCode == v.ExitCode {
				return v, t, true
			}
		}
	}
	return Validator{}, nil, false
}
