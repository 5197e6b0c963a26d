// Package taint removes the node's startup taint once the agent is ready, so
// clusters that taint new nodes schedule no app pod before redirection works.
package taint

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/util/retry"
)

// Remove deletes every taint with key from node (whatever its effect: the
// key is ours, and a NoExecute variant must not outlive readiness either).
// It is idempotent: no taint, no write. Concurrent writers (kubelet, the node
// lifecycle controller) are handled by patching with the resourceVersion
// read, and retrying on conflict. Needs get and patch on nodes.
func Remove(ctx context.Context, nodes corev1client.NodesGetter, nodeName, key string) error {
	if key == "" {
		return fmt.Errorf("remove startup taint: empty taint key")
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := nodes.Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		kept := make([]corev1.Taint, 0, len(node.Spec.Taints))
		for _, t := range node.Spec.Taints {
			if t.Key != key {
				kept = append(kept, t)
			}
		}
		if len(kept) == len(node.Spec.Taints) {
			return nil
		}
		// A merge patch replaces the taints list as a whole; the
		// resourceVersion in it makes the API server refuse (409) a patch
		// based on a stale read, so no other taint change is lost.
		if beforePatch != nil {
			beforePatch()
		}
		patch, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": node.ResourceVersion},
			"spec":     map[string]any{"taints": kept},
		})
		if err != nil {
			return err
		}
		_, err = nodes.Nodes().Patch(ctx, nodeName, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("remove taint %s from node %s: %w", key, nodeName, err)
	}
	return nil
}

// beforePatch lets tests change the node between read and write.
var beforePatch func()

// Has reports whether node carries a taint with key.
func Has(node *corev1.Node, key string) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}
