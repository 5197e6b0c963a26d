// Package backend applies a RuleSet to a pod's network namespace.
//
// Backends:
//   - nftables: nf_tables netlink messages sent in-process (no host binary),
//     one transaction for the whole rule set;
//   - iptables-nft, iptables-legacy: the host's iptables binaries, one
//     iptables-restore per address family, under a per-netns lock.
//
// "auto" picks nftables when the kernel has nf_tables with NAT, else
// iptables-nft, else iptables-legacy. The choice is made again on every
// plugin run (nothing is cached across processes) and costs one netlink
// dump; NAT support shows in the first, atomic nftables transaction, and
// only a refusal for lack of a feature falls back to iptables (auto.go).
//
// Every backend keeps the same promises: Apply replaces our rules
// atomically and is idempotent; after any failure the netns holds none of
// our rules; Delete is idempotent and succeeds when the netns is gone;
// Check names what is missing.
package backend

import (
	"errors"
	"fmt"

	"github.com/mesh-cni/mesh-cni/internal/backend/iptables"
	"github.com/mesh-cni/mesh-cni/internal/backend/nftables"
	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// Backend programs rule sets into pod network namespaces.
type Backend interface {
	Name() string
	Apply(netnsPath string, rs rules.RuleSet) error
	Check(netnsPath string, rs rules.RuleSet) error
	Delete(netnsPath string) error
}

// Backend names in the plugin config.
const (
	Auto           = "auto"
	NFTables       = "nftables"
	IptablesNFT    = "iptables-nft"
	IptablesLegacy = "iptables-legacy"
)

// Names lists the valid config values.
var Names = []string{Auto, NFTables, IptablesNFT, IptablesLegacy}

// New returns the named backend; "" means auto.
func New(name string) (Backend, error) {
	switch name {
	case "", Auto:
		return detect()
	case NFTables:
		return nftables.New(), nil
	case IptablesNFT:
		return iptables.New(iptables.NFT)
	case IptablesLegacy:
		return iptables.New(iptables.Legacy)
	}
	return nil, fmt.Errorf("unknown backend %q (want one of %v)", name, Names)
}

// DeleteAll removes what any backend may have written, without the
// configured one: DEL uses it when that backend cannot run here (a pinned
// iptables variant whose tools the host lacks). The nftables table and the
// iptables-nft chains go through netlink; iptables-legacy rules can exist
// only where its tools do, and are removed with them. A netns holding none
// of ours costs netlink dumps and no exec.
func DeleteAll(netnsPath string) error {
	err := errors.Join(nftables.New().Delete(netnsPath), iptables.DeleteNFT(netnsPath))
	if b, lerr := iptables.New(iptables.Legacy); lerr == nil {
		err = errors.Join(err, b.Delete(netnsPath))
	}
	return err
}
