package main

import (
	"path/filepath"
	"slices"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
)

// retiredPlugins are the mesh CNI plugins mesh-cni takes over
// (internal/agent/install.MigrateSources; a test keeps the two lists equal). The
// agent installs this binary under such a name once the plugin's own
// binary is gone, because a runtime that replays DEL from its cache
// (CRI-O: the config cached in /var/lib/cni/results at ADD) still runs the
// old plugin for pods it set up; libcni fails that DEL when the binary is
// missing ("failed to find plugin"), and the pod's sandbox never goes.
var retiredPlugins = []string{"istio-cni", "linkerd-cni"}

// retiredAs is the retired plugin this binary runs as ("" if none), from
// the name the runtime executed.
func retiredAs(argv0 string) string {
	if name := filepath.Base(argv0); slices.Contains(retiredPlugins, name) {
		return name
	}
	return ""
}

// retiredFuncs answer for a retired plugin. DEL succeeds with nothing to
// do, which is what both plugins' DEL did (istio.io/istio cni/pkg/plugin/
// plugin.go CmdDelete returns nil; linkerd2-proxy-init cni-plugin/main.go
// cmdDel logs "not implemented" and returns nil): a pod's rules live in
// its netns and go with it. CHECK, STATUS and GC succeed (nil: skel's
// default). ADD fails: a config still naming the retired plugin would
// leave the pod unredirected.
func retiredFuncs(name string) skel.CNIFuncs {
	return skel.CNIFuncs{
		Add: func(*skel.CmdArgs) error {
			return types.NewError(types.ErrInvalidNetworkConfig,
				name+" was replaced by mesh-cni on this node; this binary only answers DEL for pods it set up",
				"a CNI config still chains "+name+": remove its entry, or run the mesh-cni agent with --migrate-from="+name+" so it replaces it")
		},
		Del: func(*skel.CmdArgs) error { return nil },
	}
}
