//go:build tools

// Package tools pins the flannel CNI plugin in this module, so that
// hack/build-flannel.sh builds it at the version in go.mod. It is the meta
// plugin of github.com/containernetworking/plugins (plugins/meta/flannel),
// which v0.9.1 is the last release to carry; it delegates to bridge and
// host-local. Its own module because flanneld links a newer
// containernetworking/plugins as a library.
package tools

import (
	_ "github.com/containernetworking/plugins/plugins/meta/flannel"
)
