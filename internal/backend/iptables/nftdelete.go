package iptables

import (
	"errors"
	"fmt"
	"os"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// deleteNFT removes our chains and every rule jumping to them from the
// tables iptables-nft keeps in nf_tables (families ip and ip6), in one
// netlink transaction and without an exec: iptables-nft reads the kernel's
// state on every run, so it sees the same result as an iptables-restore
// would leave, at a fraction of the cost (DEL would otherwise list and
// restore per family, four execs).
func deleteNFT(ns *os.File) error {
	c, err := nftables.New(nftables.WithNetNSFd(int(ns.Fd())))
	if err != nil {
		return fmt.Errorf("nftables netlink: %w", err)
	}
	queued := false
	for _, fam := range []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6} {
		chains, err := c.ListChainsOfTableFamily(fam)
		if errors.Is(err, unix.EPROTONOSUPPORT) || errors.Is(err, unix.EAFNOSUPPORT) {
			return nil // no nf_tables netlink here: no chains of ours can exist
		}
		if err != nil {
			return fmt.Errorf("list chains: %w", err)
		}
		var mine []*nftables.Chain
		for _, ch := range chains {
			if ch.Table == nil {
				continue // a chain message without its table attribute names nothing we can address
			}
			if ours(ch.Name) {
				mine = append(mine, ch)
				continue
			}
			rules, err := c.GetRules(ch.Table, ch)
			if err != nil {
				return fmt.Errorf("list rules of %s %s: %w", ch.Table.Name, ch.Name, err)
			}
			for _, r := range rules {
				if jumpsToOurs(r) {
					if err := c.DelRule(r); err != nil {
						return fmt.Errorf("delete rule in %s %s: %w", ch.Table.Name, ch.Name, err)
					}
					queued = true
				}
			}
		}
		// Jumps go first, then our chains are emptied and removed.
		for _, ch := range mine {
			c.FlushChain(ch)
		}
		for _, ch := range mine {
			c.DelChain(ch)
			queued = true
		}
	}
	if !queued {
		return nil
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("remove iptables-nft rules: %w", err)
	}
	return nil
}

func jumpsToOurs(r *nftables.Rule) bool {
	for _, e := range r.Exprs {
		if v, ok := e.(*expr.Verdict); ok && (v.Kind == expr.VerdictJump || v.Kind == expr.VerdictGoto) && ours(v.Chain) {
			return true
		}
	}
	return false
}
