package main

import (
	"context"
	"log/slog"
	"path/filepath"

	"k8s.io/client-go/kubernetes"
)

// The Kubernetes-facing controllers (pod cache, repair, startup taint)
// live in their own packages; controllers_*.go set these hooks. An agent
// built without one logs that the feature is missing.
var (
	servePodCache func(ctx context.Context, client kubernetes.Interface, nodeName, socketPath string) error
	runRepair     func(ctx context.Context, client kubernetes.Interface, nodeName, policy string) error
	removeTaint   func(ctx context.Context, client kubernetes.Interface, nodeName, key string) error
)

func startControllers(ctx context.Context, client kubernetes.Interface, cfg *config, log *slog.Logger) {
	if servePodCache != nil {
		go func() {
			if err := servePodCache(ctx, client, cfg.nodeName, filepath.Join(cfg.runDir, "agent.sock")); err != nil && ctx.Err() == nil {
				log.Error("pod cache stopped; the plugin falls back to the API", "err", err)
			}
		}()
	} else {
		log.Warn("pod cache is not built into this agent; the plugin falls back to the API")
	}
	if cfg.repair {
		if runRepair != nil {
			go func() {
				if err := runRepair(ctx, client, cfg.nodeName, cfg.repairPolicy); err != nil && ctx.Err() == nil {
					log.Error("repair controller stopped", "err", err)
				}
			}()
		} else {
			log.Warn("repair controller is not built into this agent")
		}
	}
}
