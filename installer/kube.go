package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/mesh-cni/mesh-cni/pkg/agent"
	"github.com/mesh-cni/mesh-cni/pkg/kubeconfig"
	"github.com/mesh-cni/mesh-cni/pkg/version"
)

// newClient builds the clientset from the pod's service account, reading
// the token file on every refresh so rotation needs nothing from us.
func newClient(o kubeconfig.Options) (kubernetes.Interface, error) {
	rc := &rest.Config{
		Host:            o.Server(),
		BearerTokenFile: o.TokenPath,
		TLSClientConfig: rest.TLSClientConfig{CAFile: o.CAPath},
		UserAgent:       "mesh-cni-agent/" + version.Version,
		Timeout:         30 * time.Second,
	}
	return kubernetes.NewForConfig(rc)
}

// publisher patches the status annotation onto this node.
func publisher(client kubernetes.Interface, nodeName string) func(context.Context, agent.Status) error {
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

func patchAnnotation(ctx context.Context, client kubernetes.Interface, nodeName string, value any) error {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{agent.StatusAnnotation: value}},
	})
	if err != nil {
		return err
	}
	_, err = client.CoreV1().Nodes().Patch(ctx, nodeName, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("patch node %s: %w", nodeName, err)
	}
	return nil
}

// clearStatus removes the annotation after an uninstall.
func clearStatus(ctx context.Context, client kubernetes.Interface, nodeName string) error {
	if nodeName == "" {
		return nil
	}
	return patchAnnotation(ctx, client, nodeName, nil)
}

// shouldUninstall decides what a stop means. In auto mode only a
// DaemonSet that is gone or being deleted means uninstall; a rolling
// update, drain or restart keeps everything in place so no pod starts
// unmeshed, and so does any doubt (API unreachable).
func shouldUninstall(client kubernetes.Interface, cfg *config) (bool, string) {
	switch cfg.uninstallMode {
	case "always":
		return true, "uninstall-mode=always"
	case "never":
		return false, "uninstall-mode=never"
	}
	if client == nil || cfg.namespace == "" {
		return false, "cannot look up the DaemonSet (no API access or namespace)"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ds, err := client.AppsV1().DaemonSets(cfg.namespace).Get(ctx, cfg.daemonSetName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true, fmt.Sprintf("DaemonSet %s/%s is gone", cfg.namespace, cfg.daemonSetName)
	case err != nil:
		return false, fmt.Sprintf("cannot look up the DaemonSet: %v", err)
	case ds.DeletionTimestamp != nil:
		return true, fmt.Sprintf("DaemonSet %s/%s is being deleted", cfg.namespace, cfg.daemonSetName)
	}
	return false, "DaemonSet still exists (restart, upgrade or drain)"
}
