package main

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/mesh-cni/mesh-cni/internal/backend"
	"github.com/mesh-cni/mesh-cni/internal/backend/policy"
	"github.com/mesh-cni/mesh-cni/internal/config"
	"github.com/mesh-cni/mesh-cni/internal/node"
	"github.com/mesh-cni/mesh-cni/internal/rules"
)

func cmdAdd(args *skel.CmdArgs) error {
	start := time.Now()
	conf, err := config.ParseScoped(args.StdinData)
	if conf == nil {
		return err
	}
	log := newLogger(conf.LogLevel, "ADD", args)
	ev := node.Event{Command: "ADD", Decision: "failed"}
	defer func() { report(conf.ReportSocket, ev, start) }()
	if err != nil {
		if exemptDespite(conf, err, args, log, &ev) {
			return types.PrintResult(passThrough(conf), conf.CNIVersion)
		}
		log.Error("ADD failed", "pod", ev.Namespace+"/"+ev.Pod, "error", err.Error())
		return failed(&ev, err)
	}

	err = add(conf, args, log, &ev)
	if err != nil {
		log.Error("ADD failed", "pod", ev.Namespace+"/"+ev.Pod, "error", err.Error())
		return failed(&ev, err)
	}
	log.Info("ADD", "pod", ev.Namespace+"/"+ev.Pod, "decision", ev.Decision, "mesh", ev.Mesh,
		"reason", ev.Reason, "backend", ev.Backend, "ms", time.Since(start).Milliseconds())
	return types.PrintResult(passThrough(conf), conf.CNIVersion)
}

// passThrough is what ADD prints: the previous result unchanged or, when
// mesh-cni runs unchained (Multus, OpenShift), an empty result.
func passThrough(conf *config.NetConf) types.Result {
	if conf.PrevResult != nil {
		return conf.PrevResult
	}
	return &current.Result{CNIVersion: current.ImplementedSpecVersion}
}

func add(conf *config.NetConf, args *skel.CmdArgs, log *slog.Logger, ev *node.Event) error {
	netns, err := ns.GetNS(args.Netns)
	if err != nil {
		return types.NewError(types.ErrInvalidNetNS, "failed to open netns "+args.Netns, err.Error())
	}
	netns.Close()

	d, err := judgePod(conf, args, log, ev)
	if err != nil || !d.Meshed {
		return err
	}
	b, err := pickBackend(conf, log, ev)
	if err != nil {
		return cniErr(ErrApply, "backend %s: %v", conf.Backend, err)
	}
	applyStart := time.Now()
	rs := rules.Generate(*d.Spec)
	if err := loopbackAddrs(args.Netns, rs); err != nil {
		return cniErr(ErrApply, "pod %s/%s: %s: %v", ev.Namespace, ev.Pod, d.Mesh, err)
	}
	err = b.Apply(args.Netns, rs)
	// auto names the backend that took the rules only after Apply.
	ev.Backend = b.Name()
	if from := backend.FallbackFrom(b); from != "" {
		ev.Fallback = from
		log.Warn("backend unusable on this host, using another", "backend", from, "used", b.Name())
	}
	if err != nil {
		// Every backend removes all of ours before it returns an error
		// (internal/backend), so the pod is never left half redirected.
		return cniErr(ErrApply, "write %s rules for pod %s/%s with %s: %v", d.Mesh, ev.Namespace, ev.Pod, b.Name(), err)
	}
	log.Debug("rules applied", "backend", b.Name(), "families", fmt.Sprint(d.Spec.Families), "us", time.Since(applyStart).Microseconds())
	ev.Decision = "meshed"
	return nil
}

// loopbackAddrs adds the addresses the mesh's proxy expects on lo (Kuma's
// ::6), before any rule: without them its IPv6 passthrough fails.
func loopbackAddrs(netns string, rs rules.RuleSet) error {
	if len(rs.LoopbackAddrs) == 0 {
		return nil
	}
	f, err := os.Open(netns)
	if err != nil {
		return fmt.Errorf("open netns: %w", err)
	}
	defer f.Close()
	return policy.AddLoopbackAddrs(f, rs.LoopbackAddrs)
}
