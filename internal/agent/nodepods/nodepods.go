// Package nodepods is the one informer over the pods bound to this node
// that the agent's controllers share (the pod cache and the repair
// controller), so the agent lists and watches its pods once and keeps one
// copy of each.
//
// It is built from a typed core/v1 client and a ListWatch, not from the
// all-groups informer factory, so the agent links no other API group's
// informers.
package nodepods

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
)

// New returns an informer over the pods whose spec.nodeName is node, with
// Slim as its transform. The caller runs it (Run) once; any number of
// handlers may be added, before or after.
func New(pods corev1client.PodsGetter, node string) cache.SharedIndexInformer {
	selector := fields.OneTermEqualSelector("spec.nodeName", node).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return pods.Pods(metav1.NamespaceAll).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return pods.Pods(metav1.NamespaceAll).Watch(ctx, o)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	_ = inf.SetTransform(Slim) // fails only once started
	return inf
}

// Slim keeps what the pod cache (the plugin's view of a pod) and the repair
// controller (validator exit codes, eviction preconditions) read, and drops
// the rest (managed fields, volumes, most of the status) to save memory.
func Slim(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	s := &corev1.Pod{}
	s.Name = p.Name
	s.Namespace = p.Namespace
	s.UID = p.UID
	s.ResourceVersion = p.ResourceVersion
	s.Labels = p.Labels
	s.Annotations = p.Annotations
	s.DeletionTimestamp = p.DeletionTimestamp
	s.Spec.NodeName = p.Spec.NodeName
	s.Spec.SecurityContext = p.Spec.SecurityContext
	s.Spec.InitContainers = slimContainers(p.Spec.InitContainers)
	s.Spec.Containers = slimContainers(p.Spec.Containers)
	s.Status.Phase = p.Status.Phase
	s.Status.InitContainerStatuses = p.Status.InitContainerStatuses
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget {
			s.Status.Conditions = append(s.Status.Conditions, c)
		}
	}
	return s, nil
}

func slimContainers(cs []corev1.Container) []corev1.Container {
	if cs == nil {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i, c := range cs {
		out[i] = corev1.Container{
			Name:            c.Name,
			Args:            c.Args,
			Env:             c.Env,
			SecurityContext: c.SecurityContext,
			RestartPolicy:   c.RestartPolicy,
		}
	}
	return out
}
