package main

import (
	"context"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/mesh-cni/mesh-cni/pkg/backend"
	"github.com/mesh-cni/mesh-cni/pkg/config"
	"github.com/mesh-cni/mesh-cni/pkg/node"
	"github.com/mesh-cni/mesh-cni/pkg/rules"
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

	namespace, name, err := podID(args.Args)
	if err != nil {
		return err
	}
	ev.Namespace, ev.Pod = namespace, name
	if why := exempt(conf, namespace, name); why != "" {
		ev.Decision, ev.Reason = "skipped", why
		return nil
	}
	fams, err := podFamilies(conf.Result, args.Netns)
	if err != nil {
		return types.NewError(types.ErrInvalidNetNS, "cannot read the pod's addresses", err.Error())
	}
	d, err := judge(context.Background(), conf, log, namespace, name, fams)
	if err != nil {
		return err
	}
	ev.Mesh, ev.Reason = d.Mesh, d.Reason
	if !d.Meshed {
		ev.Decision = "skipped"
		return nil
	}
	b, err := backend.New(conf.Backend)
	if err != nil {
		return cniErr(ErrApply, "backend %s: %v", conf.Backend, err)
	}
	ev.Backend = b.Name()
	if err := b.Check(args.Netns, rules.Generate(*d.Spec)); err != nil {
		log.Error("CHECK failed", "pod", namespace+"/"+name, "error", err.Error())
		return cniErr(ErrRulesMissing, "pod %s/%s: %s rules not intact (%s): %v", namespace, name, d.Mesh, b.Name(), err)
	}
	ev.Decision = "meshed"
	log.Debug("CHECK ok", "pod", namespace+"/"+name, "ms", time.Since(start).Milliseconds())
	return nil
}
