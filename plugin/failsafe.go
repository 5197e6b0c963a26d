package main

import (
	"errors"
	"log/slog"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/mesh-cni/mesh-cni/internal/backend"
	"github.com/mesh-cni/mesh-cni/internal/config"
	"github.com/mesh-cni/mesh-cni/internal/node"
)

// exemptDespite reports whether a pod may pass although the entry did not
// validate (perr): the entry still exempts it (config.ParseScoped), so a
// bad value elsewhere never fails kube-system or the agent's own pods.
func exemptDespite(conf *config.NetConf, perr error, args *skel.CmdArgs, log *slog.Logger, ev *node.Event) bool {
	namespace, name, err := podID(args.Args)
	if err != nil {
		return false
	}
	ev.Namespace, ev.Pod, ev.PodUID = namespace, name, podUID(args.Args)
	why := conf.Exempt(namespace, name)
	if why == "" {
		ev.Reason = "invalid-config"
		return false
	}
	ev.Decision, ev.Reason = "skipped", why
	log.Warn("config invalid; pod is exempt and passes", "pod", namespace+"/"+name, "reason", why, "error", perr.Error())
	return true
}

// pickBackend is the configured backend or, when a pinned iptables variant
// cannot run on this host, native nftables: a missing tool must not stop
// every meshed pod on the node. The fallback is logged and reported
// (ev.Fallback, counted by the agent).
func pickBackend(conf *config.NetConf, log *slog.Logger, ev *node.Event) (backend.Backend, error) {
	b, err := backend.New(conf.Backend)
	if err == nil || (conf.Backend != backend.IptablesNFT && conf.Backend != backend.IptablesLegacy) {
		return b, err
	}
	fb, ferr := backend.New(backend.NFTables)
	if ferr != nil {
		return nil, errors.Join(err, ferr)
	}
	ev.Fallback = conf.Backend
	log.Warn("backend unusable on this host, using nftables", "backend", conf.Backend, "error", err.Error())
	return fb, nil
}
