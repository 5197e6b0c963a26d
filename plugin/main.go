// Command mesh-cni is a chained CNI plugin that writes a meshed pod's
// traffic redirection into its network namespace. Run without CNI_COMMAND it
// prints its version (mesh-cni version); "what would ADD do for this pod" is
// mesh-cnictl explain.
package main

import (
	"os"
	"runtime"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/mesh-cni/mesh-cni/internal/backend/nftables"
	bv "github.com/mesh-cni/mesh-cni/internal/version"
)

func main() {
	// One P: the plugin's work is serial, and with a second P the runtime
	// wakes more threads, whose start-up and cross-CPU TLB flushes cost
	// ~0.6 ms of a ~5 ms ADD (bench/plugin, docs/benchmarks.md).
	runtime.GOMAXPROCS(1)
	nftables.KeepSockets(true) // report hands them to the agent
	if name := retiredAs(os.Args[0]); name != "" {
		skel.PluginMainFuncs(retiredFuncs(name), version.All, name+" (retired: mesh-cni "+bv.Version+" answers DEL for pods it set up)")
		return
	}
	if os.Getenv("CNI_COMMAND") == "" && len(os.Args) > 1 && isSubcommand(os.Args[1]) {
		os.Exit(runCLI(os.Args[1:], os.Stdout, os.Stderr))
	}
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:    guarded(cmdAdd),
		Check:  guarded(cmdCheck),
		Del:    guarded(cmdDel),
		Status: guarded(cmdStatus),
		GC:     guarded(cmdGC),
	}, version.All, "mesh-cni "+bv.Version+" (without CNI_COMMAND: mesh-cni version; explain: mesh-cnictl explain)")
}
