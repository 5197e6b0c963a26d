package iptables

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/mesh-cni/mesh-cni/internal/backend/policy"
	"github.com/mesh-cni/mesh-cni/internal/backend/validate"
	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// Check lists the netns with iptables-save, per family, and compares it
// with what rs renders to: each of our chains exists with the same number
// of rules and the same verdict per rule, and every jump from a built-in
// chain to ours is there. The error names the first difference.
func (b *Backend) Check(netnsPath string, rs rules.RuleSet) error {
	if err := validate.RuleSet(rs); err != nil {
		return fmt.Errorf("invalid rule set: %w", err)
	}
	err := inSandbox(netnsPath, func(s *sandbox) error {
		for _, fam := range rs.Families {
			want, err := parse(rules.IptablesRestore(rs, fam))
			if err != nil {
				return fmt.Errorf("%s: rendered rules: %w", fam, err)
			}
			out, err := s.run(b.bins[fam].save, "")
			if err != nil {
				return fmt.Errorf("%s: %w", fam, err)
			}
			have, err := parse(out)
			if err != nil {
				return fmt.Errorf("%s: iptables-save: %w", fam, err)
			}
			if err := compare(want, have); err != nil {
				return fmt.Errorf("%s: %w", fam, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	ns, err := os.Open(netnsPath)
	if err != nil {
		return fmt.Errorf("open netns: %w", err)
	}
	defer ns.Close()
	return policy.Check(ns, rs)
}

func compare(want, have *dump) error {
	for _, t := range want.tables {
		for chain, rules := range want.rules[t] {
			got := have.rules[t][chain]
			if !ours(chain) {
				// A built-in chain: our jumps must be there.
				for _, r := range rules {
					if !slices.ContainsFunc(got, func(g []string) bool { return target(g) == target(r) }) {
						return fmt.Errorf("table %s: jump from %s to %s is missing", t, chain, target(r))
					}
				}
				continue
			}
			if !slices.Contains(have.chains[t], chain) {
				return fmt.Errorf("table %s: chain %s is missing", t, chain)
			}
			if len(got) != len(rules) {
				return fmt.Errorf("table %s chain %s: has %d rules, want %d", t, chain, len(got), len(rules))
			}
			for i := range rules {
				if k, w := key(got[i]), key(rules[i]); k != w {
					return fmt.Errorf("table %s chain %s rule %d: has %s, want %s", t, chain, i+1, k, w)
				}
			}
		}
		for _, chain := range want.chains[t] {
			if !slices.Contains(have.chains[t], chain) {
				return fmt.Errorf("table %s: chain %s is missing", t, chain)
			}
		}
	}
	// Our chains that the rule set does not have were not written for it.
	for _, t := range have.tables {
		for _, chain := range have.chains[t] {
			if ours(chain) && !slices.Contains(want.chains[t], chain) {
				return fmt.Errorf("table %s: unexpected chain %s", t, chain)
			}
		}
	}
	return nil
}

// key is what decides a rule's effect for the comparison: the target and
// its port, the protocol and the owner match. iptables-save prints matches
// in its own canonical form, so the rest is left to the rule count.
func key(rule []string) string {
	k := []string{"-j " + target(rule)}
	for _, f := range []string{"--to-ports", "--on-port", "-p", "--uid-owner", "--gid-owner"} {
		if v := flag(rule, f); v != "" {
			k = append(k, f+" "+v)
		}
	}
	return strings.Join(k, " ")
}
