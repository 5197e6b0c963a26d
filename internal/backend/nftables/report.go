package nftables

import (
	"fmt"

	"github.com/google/nftables"
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
	ns, c, done, err := openConn(netnsPath)
	if err != nil {
		return nil, err
	}
	defer done()
	var have []*nftables.Chain
	if ok, err := haveTable(c); err != nil {
		return nil, err
	} else if ok {
		if have, err = c.ListChainsOfTableFamily(table.Family); err != nil {
			return nil, fmt.Errorf("list nftables chains: %w", err)
		}
	}
	rep := &reporter{conn: c, ks: &kernelSets{conn: c}, have: have,
		bld: &builder{table: table, sets: map[uint32][]nftables.SetElement{}}}
	want := map[string]bool{}
	for _, t := range rs.Tables {
		for _, ch := range t.Chains {
			want[ch.Name] = true
			if err := rep.chain(t.Name, ch, rs.Families); err != nil {
				return nil, err
			}
		}
	}
	for _, ch := range have {
		if ch.Table.Name == table.Name && !want[ch.Name] {
			rep.add(ch.Name, "chain "+ch.Name, finding.Extra)
		}
	}
	if len(rs.PolicyRoutes) > 0 {
		state, text := finding.Present, "policy routes (ip rule fwmark, local route)"
		if err := policy.Check(ns, rs); err != nil {
			state, text = finding.Missing, err.Error()
		}
		rep.out = append(rep.out, finding.Finding{Family: rules.NftFamily, Table: "policy routing", Rule: text, State: state})
	}
	return rep.out, nil
}

// reporter collects the findings of one netns's table.
type reporter struct {
	conn *nftables.Conn
	ks   *kernelSets
	bld  *builder
	have []*nftables.Chain // the table's chains in the kernel
	out  []finding.Finding
}

func (rep *reporter) add(chain, rule, state string) {
	rep.out = append(rep.out, finding.Finding{Family: rules.NftFamily, Table: rules.NftTable, Chain: chain, Rule: rule, State: state})
}

// chain reports ch of table tbl: each expected rule present or missing,
// and each kernel rule no expected one took as extra. A chain missing or
// hooked elsewhere has all its rules missing.
func (rep *reporter) chain(tbl string, ch rules.Chain, families []rules.Family) error {
	ws, texts, err := expected(rep.bld, ch, families)
	if err != nil {
		return err
	}
	got := find(rep.have, table.Name, ch.Name)
	if got == nil || checkHook(tbl, ch, got) != nil {
		rep.add(ch.Name, "chain "+ch.Name, finding.Missing)
		for _, s := range texts {
			rep.add(ch.Name, s, finding.Missing)
		}
		if got != nil {
			rep.add(ch.Name, "chain "+ch.Name+" (hooked elsewhere)", finding.Extra)
		}
		return nil
	}
	rep.add(ch.Name, "chain "+ch.Name, finding.Present)
	krs, err := rep.conn.GetRules(got.Table, got)
	if err != nil {
		return fmt.Errorf("list rules of chain %s: %w", ch.Name, err)
	}
	used := make([]bool, len(krs))
	for i, w := range ws {
		state := finding.Missing
		for j, r := range krs {
			if !used[j] && signature(r.Exprs) == w.sig && (len(w.sets) == 0 || checkSets(rep.ks, r.Exprs, w.sets) == nil) {
				used[j], state = true, finding.Present
				break
			}
		}
		rep.add(ch.Name, texts[i], state)
	}
	for j, r := range krs {
		if !used[j] {
			rep.add(ch.Name, describe(r), finding.Extra)
		}
	}
	return nil
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
			ws = append(ws, b.want(e, r.Comment))
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
	_, c, done, err := openConn(netnsPath)
	if err != nil {
		return false, err
	}
	defer done()
	return haveTable(c)
}
