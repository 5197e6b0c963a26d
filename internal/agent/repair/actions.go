package repair

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Event reasons.
const (
	ReasonEvicted         = "EvictedUnmeshedPod"
	ReasonDeleted         = "DeletedUnmeshedPod"
	ReasonLabeled         = "LabeledUnmeshedPod"
	ReasonEvictionBlocked = "EvictionBlocked"
	ReasonRepairFailed    = "RepairFailed"
)

// handle repairs the pod under key if it is still broken. retry asks for
// another attempt after back-off.
func (c *controller) handle(ctx context.Context, key string) (retry bool, err error) {
	obj, exists, err := c.informer.GetStore().GetByKey(key)
	if err != nil || !exists {
		return false, nil //nolint:nilerr // gone from the store: nothing to repair
	}
	pod := obj.(*corev1.Pod)
	v, term, broken := Broken(pod, c.opts.Validators)
	if !broken {
		return false, nil
	}
	if c.done(pod, false) || (c.opts.Policy == Label && c.labelled(pod)) {
		return false, nil
	}
	if err := c.limiter.Wait(ctx); err != nil {
		return false, nil //nolint:nilerr // ctx ended: stopping, not failing
	}
	why := fmt.Sprintf("init container %s exited %d: the pod started without traffic redirection", v.Container, term.ExitCode)

	var outcome Outcome
	switch c.opts.Policy {
	case Evict:
		outcome, err = c.evict(ctx, pod, why)
	case Delete:
		outcome, err = c.delete(ctx, pod, why)
	case Label:
		outcome, err = c.label(ctx, pod, why)
	}
	if outcome == "" { // the pod went away or changed identity meanwhile
		return false, nil
	}
	if c.opts.OnAttempt != nil {
		c.opts.OnAttempt(c.opts.Policy, outcome)
	}
	switch outcome {
	case Repaired:
		c.done(pod, true)
		c.opts.Log.Info("repaired pod", "pod", key, "policy", c.opts.Policy, "validator", v.Container, "exitCode", term.ExitCode)
		return false, nil
	case Blocked:
		c.opts.Log.Info("eviction blocked by a disruption budget; retrying later", "pod", key)
		return true, nil
	default:
		c.recorder.Eventf(pod, corev1.EventTypeWarning, ReasonRepairFailed, "%s; %s failed: %v", why, c.opts.Policy, err)
		return true, err
	}
}

// gone reports errors that mean the pod we judged no longer exists (deleted,
// or replaced by a pod of the same name: UID precondition failed).
func gone(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsConflict(err)
}

func (c *controller) evict(ctx context.Context, pod *corev1.Pod, why string) (Outcome, error) {
	err := c.client.Pods(pod.Namespace).EvictV1(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}},
	})
	switch {
	case err == nil:
		c.recorder.Eventf(pod, corev1.EventTypeNormal, ReasonEvicted, "%s; evicted so that it is recreated with redirection", why)
		return Repaired, nil
	case apierrors.IsTooManyRequests(err):
		c.recorder.Eventf(pod, corev1.EventTypeWarning, ReasonEvictionBlocked, "%s; eviction refused (%v), retrying later", why, err)
		return Blocked, err
	case gone(err):
		return "", nil
	default:
		return Failed, fmt.Errorf("evict %s/%s: %w", pod.Namespace, pod.Name, err)
	}
}

func (c *controller) delete(ctx context.Context, pod *corev1.Pod, why string) (Outcome, error) {
	err := c.client.Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &pod.UID},
	})
	switch {
	case err == nil:
		c.recorder.Eventf(pod, corev1.EventTypeNormal, ReasonDeleted, "%s; deleted so that it is recreated with redirection", why)
		return Repaired, nil
	case gone(err):
		return "", nil
	default:
		return Failed, fmt.Errorf("delete %s/%s: %w", pod.Namespace, pod.Name, err)
	}
}

func (c *controller) labelKV() (string, string) {
	k, v, _ := strings.Cut(c.opts.Label, "=")
	return k, v
}

func (c *controller) labelled(pod *corev1.Pod) bool {
	k, v := c.labelKV()
	got, ok := pod.Labels[k]
	return ok && got == v
}

func (c *controller) label(ctx context.Context, pod *corev1.Pod, why string) (Outcome, error) {
	k, v := c.labelKV()
	// The UID in the patch makes it fail (409) on a pod replaced under the
	// same name, instead of labelling a healthy successor. Through the
	// status subresource, as Istio's repair does (cni/pkg/repair
	// repaircontroller.go labelBrokenPod): RBAC then needs pods/status
	// patch, which cannot change the pod's spec (its image), not pods patch.
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": pod.UID, "labels": map[string]string{k: v}},
	})
	if err != nil {
		return Failed, err
	}
	_, err = c.client.Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	switch {
	case err == nil:
		c.recorder.Eventf(pod, corev1.EventTypeWarning, ReasonLabeled, "%s; labelled %s", why, c.opts.Label)
		return Repaired, nil
	case gone(err):
		return "", nil
	default:
		return Failed, fmt.Errorf("label %s/%s: %w", pod.Namespace, pod.Name, err)
	}
}
