//go:build tools

// Package tools pins flannel's own commands in this module, so that
// hack/build-flannel.sh builds them at the version in go.mod: flanneld (the
// module's main package) and install-conf, which the kube-flannel DaemonSet's
// install-cni init container runs.
package tools

import (
	_ "github.com/flannel-io/flannel"
	_ "github.com/flannel-io/flannel/cmd/install_conf"
)
