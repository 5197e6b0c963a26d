package main

import (
	"context"
	"log/slog"
	"path/filepath"

	"k8s.io/client-go/kubernetes"

	"github.com/mesh-cni/mesh-cni/pkg/metrics"
	"github.com/mesh-cni/mesh-cni/pkg/podcache"
	"github.com/mesh-cni/mesh-cni/pkg/repair"
	"github.com/mesh-cni/mesh-cni/pkg/taint"
)

// The Kubernetes-facing controllers live in their own packages; these are
// the calls the agent makes (variables so tests can watch them).
var (
	servePodCache = podcache.Serve
	removeTaint   = taint.Remove
	runRepair     = func(ctx context.Context, client kubernetes.Interface, nodeName, policy string, log *slog.Logger) error {
		return repair.Run(ctx, client, repair.Options{
			NodeName: nodeName,
			Policy:   repair.Policy(policy),
			OnAttempt: func(p repair.Policy, o repair.Outcome) {
				metrics.RepairActions.WithLabelValues(string(p), string(o)).Inc()
			},
			Log: log,
		})
	}
)

func startControllers(ctx context.Context, client kubernetes.Interface, cfg *config, log *slog.Logger) {
	go func() {
		if err := servePodCache(ctx, client, cfg.nodeName, filepath.Join(cfg.runDir, "agent.sock")); err != nil && ctx.Err() == nil {
			log.Error("pod cache stopped; the plugin falls back to the API", "err", err)
		}
	}()
	if cfg.repair {
		go func() {
			if err := runRepair(ctx, client, cfg.nodeName, cfg.repairPolicy, log.With("component", "repair")); err != nil && ctx.Err() == nil {
				log.Error("repair controller stopped", "err", err)
			}
		}()
	}
}
