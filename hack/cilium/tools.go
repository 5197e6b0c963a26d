//go:build tools

// Package tools pins Cilium's own commands in this module, so that
// hack/build-cilium.sh builds them at the version in go.mod: the agent, its
// CNI plugin, the operator (generic IPAM provider) and the helpers the agent
// image runs (cilium-dbg, cilium-health and its responder, the bpffs/cgroup
// mount tool, sysctlfix, bugtool).
package tools

import (
	_ "github.com/cilium/cilium/bugtool"
	_ "github.com/cilium/cilium/cilium-dbg"
	_ "github.com/cilium/cilium/cilium-health"
	_ "github.com/cilium/cilium/cilium-health/responder"
	_ "github.com/cilium/cilium/daemon"
	_ "github.com/cilium/cilium/operator"
	_ "github.com/cilium/cilium/plugins/cilium-cni"
	_ "github.com/cilium/cilium/tools/mount"
	_ "github.com/cilium/cilium/tools/sysctlfix"
)
