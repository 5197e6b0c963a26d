package main

import (
	"errors"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/mesh-cni/mesh-cni/internal/backend"
	"github.com/mesh-cni/mesh-cni/internal/config"
	"github.com/mesh-cni/mesh-cni/internal/node"
)

// cmdDel removes what ADD wrote. It must succeed whenever there is nothing
// left to remove: netns gone, DEL twice, DEL after a failed ADD (even one
// that failed on a bad config).
func cmdDel(args *skel.CmdArgs) error {
	start := time.Now()
	conf, perr := config.ParseScoped(args.StdinData)
	if conf == nil {
		// A config ADD rejected wrote nothing; clean up with the defaults
		// rather than leave the pod undeletable.
		conf = delDefaults()
	}
	log := newLogger(conf.LogLevel, "DEL", args)
	if perr != nil {
		// Rules an earlier, valid entry had written may be of any backend.
		conf.Backend = backend.Auto
		log.Warn("config invalid, deleting with backend auto", "error", perr.Error())
	}
	ev := node.Event{Command: "DEL", Decision: "deleted"}
	if namespace, name, err := podID(args.Args); err == nil {
		ev.Namespace, ev.Pod, ev.PodUID = namespace, name, podUID(args.Args)
	}
	defer func() { report(conf.ReportSocket, ev, start) }()

	if args.Netns == "" {
		ev.Reason = "no-netns"
		return nil
	}
	netns, err := ns.GetNS(args.Netns)
	if err != nil {
		var gone ns.NSPathNotExistErr
		if errors.As(err, &gone) {
			ev.Reason = "netns-gone"
			log.Debug("netns already gone", "netns", args.Netns)
			return nil
		}
		return failed(&ev, cniErr(ErrApply, "open netns %s: %v", args.Netns, err))
	}
	netns.Close()

	b, err := backend.New(conf.Backend)
	if err != nil {
		// The configured backend cannot run here, so it wrote nothing; ADD
		// may have fallen back to nftables. Remove whatever is ours.
		log.Warn("backend unusable on this host, deleting through netlink", "backend", conf.Backend, "error", err.Error())
		ev.Backend, ev.Fallback = "netlink", conf.Backend
		if err := backend.DeleteAll(args.Netns); err != nil {
			return failed(&ev, cniErr(ErrApply, "remove rules from %s: %v", args.Netns, err))
		}
		return nil
	}
	ev.Backend = b.Name()
	if err := b.Delete(args.Netns); err != nil {
		var gone ns.NSPathNotExistErr
		if errors.As(err, &gone) {
			return nil
		}
		log.Error("DEL failed", "error", err.Error())
		return failed(&ev, cniErr(ErrApply, "remove rules from %s with %s: %v", args.Netns, b.Name(), err))
	}
	log.Info("DEL", "pod", ev.Namespace+"/"+ev.Pod, "backend", ev.Backend, "ms", time.Since(start).Milliseconds())
	return nil
}

// delDefaults is the config DEL falls back to when the given one does not
// parse: every default, backend auto.
func delDefaults() *config.NetConf {
	c, err := config.Parse([]byte(`{"name":"mesh-cni","type":"mesh-cni"}`))
	if err != nil {
		panic("default config does not parse: " + err.Error())
	}
	return c
}
