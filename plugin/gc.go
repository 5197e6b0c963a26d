package main

import (
	"github.com/containernetworking/cni/pkg/skel"

	"github.com/mesh-cni/mesh-cni/internal/config"
)

// cmdGC has nothing to collect: every rule mesh-cni writes lives in the
// pod's own netns and goes away with it, and the plugin keeps no state on
// the host (no cache files, no host chains, no IPAM). It still validates the
// config so a broken chain entry shows up here too.
func cmdGC(args *skel.CmdArgs) error {
	_, err := config.Parse(args.StdinData)
	return err
}
