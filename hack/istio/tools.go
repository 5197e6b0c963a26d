//go:build tools

// Package tools pins Istio's own commands in this module, so that
// hack/build-istio.sh builds them at the version in go.mod.
package tools

import (
	_ "istio.io/istio/cni/cmd/istio-cni"
	_ "istio.io/istio/istioctl/cmd/istioctl"
	_ "istio.io/istio/pilot/cmd/pilot-agent"
	_ "istio.io/istio/pilot/cmd/pilot-discovery"
)
