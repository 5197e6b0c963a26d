package nftables

import (
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"

	"github.com/mesh-cni/mesh-cni/internal/backend/finding"
	"github.com/mesh-cni/mesh-cni/internal/backend/policy"
	"github.com/mesh-cni/mesh-cni/internal/backend/validate"
	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// Report compares the netns with rs as Check does, but lists every chain
// and rule instead of stopping at the first difference: each expected one
// present or missing, each of ours rs lacks as extra. It only reads (netlink
// dumps); a kernel rule matches an expected one of its chain with the same
// signature and set elements, in any order, each used once.
func (b *Backend) Report(netnsPath string, rs rules.RuleSet) ([]finding.Finding, error) {
	if err := validate.RuleSet(rs); err != nil {
		return nil, fmt.Errorf("invalid rule set: %w", err)
	}
	ns, _, err := openNS(netnsPath)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	c, err := dial(int(ns.Fd()))
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.CloseLasting() }()
	var have []*nftables.Chain
	if ok, err := haveTable(c); err != nil {
		return nil, err
	} else if ok {
		if have, err = c.ListChainsOfTableFamily(table.Family); err != nil {
			return nil, fmt.Errorf("list nftables chains: %w", err)
		}
	}
	bld := &builder{table: table, sets: map[uint32][]nftables.SetElement{}}
	ks := &kernelSets{conn: c}
	var out []finding.Finding
	add := func(chain, rule, state string) {
		out = append(out, finding.Finding{Family: rules.NftFamily, Table: rules.NftTable, Chain: chain, Rule: rule, State: state})
	}
	want := map[string]bool{}
	for _, t := range rs.Tables {
		for _, ch := range t.Chains {
			want[ch.Name] = true
			ws, texts, err := expected(bld, ch, rs.Families)
			if err != nil {
				return nil, err
			}
			got := find(have, table.Name, ch.Name)
			if got == nil || checkHook(t.Name, ch, got) != nil {
				add(ch.Name, "chain "+ch.Name, finding.Missing)
				for _, s := range texts {
					add(ch.Name, s, finding.Missing)
				}
				if got != nil {
					add(ch.Name, "chain "+ch.Name+" (hooked elsewhere)", finding.Extra)
				}
				continue
			}
			add(ch.Name, "chain "+ch.Name, finding.Present)
			krs, err := c.GetRules(got.Table, got)
			if err != nil {
				return nil, fmt.Errorf("list rules of chain %s: %w", ch.Name, err)
			}
			used := make([]bool, len(krs))
			for i, w := range ws {
				state := finding.Missing
				for j, r := range krs {
					if !used[j] && signature(r.Exprs) == w.sig && (len(w.sets) == 0 || checkSets(ks, r.Exprs, w.sets) == nil) {
						used[j], state = true, finding.Present
						break
					}
				}
				add(ch.Name, texts[i], state)
			}
			for j, r := range krs {
				if !used[j] {
					add(ch.Name, describe(r), finding.Extra)
				}
			}
		}
	}
	for _, ch := range have {
		if ch.Table.Name == table.Name && !want[ch.Name] {
			add(ch.Name, "chain "+ch.Name, finding.Extra)
		}
	}
	if len(rs.PolicyRoutes) > 0 {
		state, text := finding.Present, "policy routes (ip rule fwmark, local route)"
		if err := policy.Check(ns, rs); err != nil {
			state, text = finding.Missing, err.Error()
		}
		out = append(out, finding.Finding{Family: rules.NftFamily, Table: "policy routing", Rule: text, State: state})
	}
	return out, nil
}

// expected is what the kernel should hold for ch: one wantRule per kernel
// rule, and its text as rules.Nft prints it (the builder follows its
// layout; the comment stands in should the two ever disagree).
func expected(b *builder, ch rules.Chain, families []rules.Family) ([]wantRule, []string, error) {
	var ws []wantRule
	var texts []string
	for i, r := range ch.Rules {
		es, err := b.rules(r, families)
		if err != nil {
			return nil, nil, fmt.Errorf("chain %s rule %d: %w", ch.Name, i+1, err)
		}
		lines := rules.NftRule(r, families)
		for k, e := range es {
			w := wantRule{sig: signature(e), comment: r.Comment}
			for _, x := range e {
				if l, ok := x.(*expr.Lookup); ok {
					w.sets = append(w.sets, b.sets[l.SetID])
				}
			}
			ws = append(ws, w)
			text := "comment \"" + r.Comment + "\""
			if len(lines) == len(es) {
				text = lines[k]
			}
			texts = append(texts, text)
		}
	}
	return ws, texts, nil
}

// describe names a kernel rule nothing expected: its comment when it has
// one, else its expressions.
func describe(r *nftables.Rule) string {
	if c, ok := userdata.GetString(r.UserData, userdata.TypeComment); ok && c != "" {
		return fmt.Sprintf("handle %d comment %q", r.Handle, c)
	}
	return fmt.Sprintf("handle %d: %s", r.Handle, signature(r.Exprs))
}

// HasTable reports whether the netns holds our table (one netlink dump).
func HasTable(netnsPath string) (bool, error) {
	ns, _, err := openNS(netnsPath)
	if err != nil {
		return false, err
	}
	defer ns.Close()
	c, err := dial(int(ns.Fd()))
	if err != nil {
		return false, err
	}
	defer func() { _ = c.CloseLasting() }()
	return haveTable(c)
}
