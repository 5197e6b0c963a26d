package main

import (
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/mesh-cni/mesh-cni/internal/config"
	"github.com/mesh-cni/mesh-cni/internal/node"
)

// cmdStatus reports whether ADD can work: only once the node agent has
// written its readiness marker (binary, chain entry and kubeconfig in place).
func cmdStatus(args *skel.CmdArgs) error {
	conf, err := config.Parse(args.StdinData)
	if err != nil {
		return err
	}
	if _, err := node.ReadMarker(conf.ReadyMarker); err != nil {
		return types.NewError(types.ErrPluginNotAvailable, "mesh-cni node agent is not ready", err.Error())
	}
	return nil
}
