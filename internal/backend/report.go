package backend

import (
	"fmt"

	"github.com/mesh-cni/mesh-cni/internal/backend/finding"
	"github.com/mesh-cni/mesh-cni/internal/backend/nftables"
	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// Reporter is a backend that lists, read-only, every expected rule of a
// rule set as present or missing in a netns and every one of its own rules
// the set lacks as extra.
type Reporter interface {
	Report(netnsPath string, rs rules.RuleSet) ([]finding.Finding, error)
}

// Report compares the netns with rs through the named backend and returns
// the name of the one that read it. Under auto, which ADD may have
// resolved either way, it reads with nftables when our table is there,
// else with the iptables variant auto falls back to when that holds any
// of ours, else with nftables (everything missing).
func Report(name, netnsPath string, rs rules.RuleSet) (string, []finding.Finding, error) {
	if name == "" || name == Auto {
		has, err := nftables.HasTable(netnsPath)
		if err != nil {
			return "", nil, err
		}
		if !has {
			if ib, ferr := iptablesFallback(); ferr == nil {
				if fs, err := ib.(Reporter).Report(netnsPath, rs); err == nil && (finding.Count(fs, finding.Present) > 0 || finding.Count(fs, finding.Extra) > 0) {
					return ib.Name(), fs, nil
				}
			}
		}
		name = NFTables
	}
	b, err := New(name)
	if err != nil {
		return "", nil, err
	}
	r, ok := b.(Reporter)
	if !ok {
		return "", nil, fmt.Errorf("backend %s cannot report", b.Name())
	}
	fs, err := r.Report(netnsPath, rs)
	return b.Name(), fs, err
}
