package main

import (
	"fmt"
	"os"
	"time"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/mesh-cni/mesh-cni/internal/backend/policy"
	"github.com/mesh-cni/mesh-cni/internal/config"
	"github.com/mesh-cni/mesh-cni/internal/node"
	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// cmdCheck rebuilds the rule set ADD wrote, from the cached prevResult and
// the pod's annotations, and asks the backend whether it is intact. A pod
// ADD skipped has nothing to check.
func cmdCheck(args *skel.CmdArgs) error {
	start := time.Now()
	conf, err := config.Parse(args.StdinData)
	if err != nil {
		return err
	}
	log := newLogger(conf.LogLevel, "CHECK", args)
	ev := node.Event{Command: "CHECK", Decision: "failed"}
	defer func() { report(conf.ReportSocket, ev, start) }()

	d, err := judgePod(conf, args, log, &ev)
	if err != nil || !d.Meshed {
		return err
	}
	b, err := pickBackend(conf, log, &ev)
	if err != nil {
		return cniErr(ErrApply, "backend %s: %v", conf.Backend, err)
	}
	ev.Backend = b.Name()
	rs := rules.Generate(*d.Spec)
	err = b.Check(args.Netns, rs)
	if err == nil && len(rs.LoopbackAddrs) > 0 {
		err = hasLoopbackAddrs(args.Netns, rs)
	}
	if err != nil {
		log.Error("CHECK failed", "pod", ev.Namespace+"/"+ev.Pod, "error", err.Error())
		return cniErr(ErrRulesMissing, "pod %s/%s: %s rules not intact (%s): %v", ev.Namespace, ev.Pod, d.Mesh, b.Name(), err)
	}
	ev.Decision = "meshed"
	log.Debug("CHECK ok", "pod", ev.Namespace+"/"+ev.Pod, "ms", time.Since(start).Milliseconds())
	return nil
}

func hasLoopbackAddrs(netns string, rs rules.RuleSet) error {
	f, err := os.Open(netns)
	if err != nil {
		return fmt.Errorf("open netns: %w", err)
	}
	defer f.Close()
	return policy.HasLoopbackAddrs(f, rs.LoopbackAddrs)
}
