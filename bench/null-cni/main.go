// Command null-cni is the benchmark's floor: a chained plugin in Go that
// does no work; it parses its config and prints prevResult back. What it
// adds over ptp alone is what any exec'd Go plugin costs on the machine
// (process start, Go runtime start-up, exit) before doing anything.
// It exists only to be measured; it is not shipped.
package main

import (
	"encoding/json"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

func passThrough(args *skel.CmdArgs) error {
	conf := &types.NetConf{}
	if err := json.Unmarshal(args.StdinData, conf); err != nil {
		return err
	}
	if err := version.ParsePrevResult(conf); err != nil {
		return err
	}
	if conf.PrevResult == nil {
		return types.PrintResult(&current.Result{CNIVersion: current.ImplementedSpecVersion}, conf.CNIVersion)
	}
	return types.PrintResult(conf.PrevResult, conf.CNIVersion)
}

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:   passThrough,
		Del:   func(*skel.CmdArgs) error { return nil },
		Check: func(*skel.CmdArgs) error { return nil },
	}, version.All, "null-cni: benchmark floor, not shipped")
}
