package iptables

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/mesh-cni/mesh-cni/internal/backend/finding"
	"github.com/mesh-cni/mesh-cni/internal/backend/policy"
	"github.com/mesh-cni/mesh-cni/internal/backend/validate"
	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// Report compares the netns with rs as Check does (iptables-save per
// family; a rule matches on its target, port, protocol and owner), but
// lists every chain and rule: each expected one present or missing, each of
// ours rs lacks as extra, and the jumps from the built-in chains to ours.
// It only reads.
func (b *Backend) Report(netnsPath string, rs rules.RuleSet) ([]finding.Finding, error) {
	if err := validate.RuleSet(rs); err != nil {
		return nil, fmt.Errorf("invalid rule set: %w", err)
	}
	var out []finding.Finding
	err := inSandbox(netnsPath, func(s *sandbox) error {
		for _, fam := range rs.Families {
			want, err := parse(rules.IptablesRestore(rs, fam))
			if err != nil {
				return fmt.Errorf("%s: rendered rules: %w", fam, err)
			}
			save, err := s.run(b.bins[fam].save, "")
			if err != nil {
				return fmt.Errorf("%s: %w", fam, err)
			}
			have, err := parse(save)
			if err != nil {
				return fmt.Errorf("%s: iptables-save: %w", fam, err)
			}
			out = append(out, report(fam.String(), want, have)...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(rs.PolicyRoutes) > 0 {
		ns, err := os.Open(netnsPath)
		if err != nil {
			return nil, fmt.Errorf("open netns: %w", err)
		}
		defer ns.Close()
		state, text := finding.Present, "policy routes (ip rule fwmark, local route)"
		if err := policy.Check(ns, rs); err != nil {
			state, text = finding.Missing, err.Error()
		}
		out = append(out, finding.Finding{Family: "ipv4+ipv6", Table: "policy routing", Rule: text, State: state})
	}
	return out, nil
}

func report(fam string, want, have *dump) []finding.Finding {
	var out []finding.Finding
	add := func(table, chain, rule, state string) {
		out = append(out, finding.Finding{Family: fam, Table: table, Chain: chain, Rule: rule, State: state})
	}
	for _, t := range want.tables {
		// Our chains in declared order, then the built-in ones jumping to them.
		for _, chain := range want.chains[t] {
			if !ours(chain) {
				continue
			}
			present := slices.Contains(have.chains[t], chain)
			add(t, chain, ":"+chain, state(present))
			got := have.rules[t][chain]
			used := make([]bool, len(got))
			for _, r := range want.rules[t][chain] {
				st := finding.Missing
				for j, g := range got {
					if !used[j] && key(g) == key(r) {
						used[j], st = true, finding.Present
						break
					}
				}
				add(t, chain, line(chain, r), st)
			}
			for j, g := range got {
				if !used[j] {
					add(t, chain, line(chain, g), finding.Extra)
				}
			}
		}
		for chain, rs := range sortedChains(want.rules[t]) {
			if ours(chain) {
				continue
			}
			for _, r := range rs {
				found := slices.ContainsFunc(have.rules[t][chain], func(g []string) bool { return target(g) == target(r) })
				add(t, chain, line(chain, r), state(found))
			}
		}
	}
	for _, t := range have.tables {
		for _, chain := range have.chains[t] {
			if ours(chain) && !slices.Contains(want.chains[t], chain) {
				add(t, chain, ":"+chain, finding.Extra)
			}
		}
	}
	return out
}

func state(ok bool) string {
	if ok {
		return finding.Present
	}
	return finding.Missing
}

// line is a rule as iptables-restore reads it, quoting what has blanks.
func line(chain string, args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"") {
			a = `"` + strings.ReplaceAll(a, `"`, `\"`) + `"`
		}
		q[i] = a
	}
	return "-A " + chain + " " + strings.Join(q, " ")
}

// sortedChains iterates m by chain name, for a stable report.
func sortedChains(m map[string][][]string) func(func(string, [][]string) bool) {
	return func(yield func(string, [][]string) bool) {
		names := make([]string, 0, len(m))
		for n := range m {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			if !yield(n, m[n]) {
				return
			}
		}
	}
}
