package main

import (
	"context"
	"log/slog"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/mesh-cni/mesh-cni/internal/agent/metrics"
	"github.com/mesh-cni/mesh-cni/internal/agent/nodepods"
	"github.com/mesh-cni/mesh-cni/internal/agent/podcache"
	"github.com/mesh-cni/mesh-cni/internal/agent/repair"
	"github.com/mesh-cni/mesh-cni/internal/agent/taint"
)

// The Kubernetes-facing controllers live in their own packages; these are
// the calls the agent makes (variables so tests can watch them).
var (
	removeTaint = taint.Remove
	runRepair   = func(ctx context.Context, core corev1client.CoreV1Interface, pods cache.SharedIndexInformer, nodeName, policy string, log *slog.Logger) error {
		return repair.Run(ctx, core, repair.Options{
			NodeName: nodeName,
			Policy:   repair.Policy(policy),
			Pods:     pods,
			OnAttempt: func(p repair.Policy, o repair.Outcome) {
				metrics.RepairActions.WithLabelValues(string(p), string(o)).Inc()
			},
			Log: log,
		})
	}
)

// startControllers runs the pod cache and the repair controller on one
// shared informer over this node's pods: one list and watch, one copy of
// each pod. It returns a lookup of a pod's UID in that informer.
func startControllers(ctx context.Context, c *clients, cfg *config, log *slog.Logger) func(namespace, name string) types.UID {
	core := c.core
	pods := nodepods.New(c.pods, cfg.nodeName)
	pc := podcache.NewShared(core, pods)
	go func() {
		if err := podcache.Serve(ctx, pc, filepath.Join(cfg.runDir, "agent.sock")); err != nil && ctx.Err() == nil {
			log.Error("pod cache stopped; the plugin falls back to the API", "err", err)
		}
	}()
	if cfg.repair {
		go func() {
			if err := runRepair(ctx, core, pods, cfg.nodeName, cfg.repairPolicy, log.With("component", "repair")); err != nil && ctx.Err() == nil {
				log.Error("repair controller stopped", "err", err)
			}
		}()
	}
	go pods.Run(ctx.Done())
	return func(namespace, name string) types.UID {
		obj, ok, err := pods.GetStore().GetByKey(namespace + "/" + name)
		if err != nil || !ok {
			return ""
		}
		if p, isPod := obj.(*corev1.Pod); isPod {
			return p.UID
		}
		return ""
	}
}
