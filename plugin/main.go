package main

import (
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"

	bv "github.com/mesh-cni/mesh-cni/pkg/version"
)

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{}, version.All, "mesh-cni "+bv.Version)
}
