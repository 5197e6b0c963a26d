package nftables

import (
	"fmt"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/mesh-cni/mesh-cni/internal/backend/policy"
	"github.com/mesh-cni/mesh-cni/internal/backend/validate"
	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// Check verifies that the netns holds rs: every table and chain, the hook of
// each base chain, and per chain the same number of rules with the same
// expressions and the same elements in the anonymous sets they look up
// (counters aside). The error names the first thing missing or different.
func (b *Backend) Check(netnsPath string, rs rules.RuleSet) error {
	if err := validate.RuleSet(rs); err != nil {
		return fmt.Errorf("invalid rule set: %w", err)
	}
	ns, c, done, err := openConn(netnsPath)
	if err != nil {
		return err
	}
	defer done()
	have, err := c.ListChainsOfTableFamily(table.Family)
	if err != nil {
		return fmt.Errorf("list nftables chains: %w", err)
	}
	bld := &builder{table: table, sets: map[uint32][]nftables.SetElement{}}
	ks := &kernelSets{conn: c}
	for _, t := range rs.Tables {
		for _, ch := range t.Chains {
			got := find(have, table.Name, ch.Name)
			where := fmt.Sprintf("table %s %s chain %s", rules.NftFamily, rules.NftTable, ch.Name)
			if got == nil {
				return fmt.Errorf("%s is missing", where)
			}
			if err := checkHook(t.Name, ch, got); err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
			if err := checkRules(c, ks, bld, ch, rs.Families, got); err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
		}
	}
	// Anything else in our table was not written for this rule set.
	want := map[string]bool{}
	for _, t := range rs.Tables {
		for _, ch := range t.Chains {
			want[ch.Name] = true
		}
	}
	for _, ch := range have {
		if ch.Table.Name == table.Name && !want[ch.Name] {
			return fmt.Errorf("table %s %s has an unexpected chain %s", rules.NftFamily, rules.NftTable, ch.Name)
		}
	}
	return policy.Check(ns, rs)
}

func find(chains []*nftables.Chain, table, name string) *nftables.Chain {
	for _, c := range chains {
		if c.Table.Name == table && c.Name == name {
			return c
		}
	}
	return nil
}

func checkHook(table string, want rules.Chain, got *nftables.Chain) error {
	if want.Hook == rules.NoHook {
		if got.Hooknum != nil {
			return fmt.Errorf("is a base chain, want a regular chain")
		}
		return nil
	}
	hook, prio, typ := hookSpec(table, want.Hook)
	if got.Hooknum == nil || *got.Hooknum != *hook || got.Priority == nil || *got.Priority != *prio || got.Type != typ {
		return fmt.Errorf("is not hooked at %s (type %s priority %d)", want.Hook, typ, *prio)
	}
	return nil
}

// wantRule is one kernel rule Check expects: its signature, the elements
// of the sets it looks up, in order, and the comment of its IR rule.
type wantRule struct {
	sig, comment string
	sets         [][]nftables.SetElement
}

// want is the wantRule of expressions e the builder made, with the
// elements it recorded for the sets e looks up.
func (b *builder) want(e []expr.Any, comment string) wantRule {
	w := wantRule{sig: signature(e), comment: comment}
	for _, x := range e {
		if l, ok := x.(*expr.Lookup); ok {
			w.sets = append(w.sets, b.sets[l.SetID])
		}
	}
	return w
}

func checkRules(c *nftables.Conn, ks *kernelSets, b *builder, want rules.Chain, families []rules.Family, got *nftables.Chain) error {
	var ws []wantRule
	for i, r := range want.Rules {
		es, err := b.rules(r, families)
		if err != nil {
			return fmt.Errorf("rule %d: %w", i+1, err)
		}
		for _, e := range es {
			ws = append(ws, b.want(e, r.Comment))
		}
	}
	have, err := c.GetRules(got.Table, got)
	if err != nil {
		return fmt.Errorf("list rules: %w", err)
	}
	if len(have) != len(ws) {
		return fmt.Errorf("has %d rules, want %d", len(have), len(ws))
	}
	for i, r := range have {
		w := ws[i]
		if s := signature(r.Exprs); s != w.sig {
			return fmt.Errorf("rule %d differs: have %s, want %s", i+1, s, w.sig)
		}
		if len(w.sets) == 0 {
			continue
		}
		if err := checkSets(ks, r.Exprs, w.sets); err != nil {
			return fmt.Errorf("rule %d (%s) differs: %w", i+1, w.comment, err)
		}
	}
	return nil
}

// signature describes the expressions that decide what a rule does; it
// leaves out set names and ids (the kernel names anonymous sets) and
// counter values.
func signature(es []expr.Any) string {
	var parts []string
	for _, e := range es {
		switch e := e.(type) {
		case *expr.Meta:
			parts = append(parts, fmt.Sprintf("meta(%d,%t)", e.Key, e.SourceRegister))
		case *expr.Cmp:
			parts = append(parts, fmt.Sprintf("cmp(%d,%x)", e.Op, e.Data))
		case *expr.Payload:
			parts = append(parts, fmt.Sprintf("payload(%d,%d,%d)", e.Base, e.Offset, e.Len))
		case *expr.Bitwise:
			parts = append(parts, fmt.Sprintf("bitwise(%x,%x)", e.Mask, e.Xor))
		case *expr.Range:
			parts = append(parts, fmt.Sprintf("range(%d,%x,%x)", e.Op, e.FromData, e.ToData))
		case *expr.Lookup:
			parts = append(parts, fmt.Sprintf("lookup(%t)", e.Invert))
		case *expr.Ct:
			parts = append(parts, fmt.Sprintf("ct(%d)", e.Key)) // the set flag is not parsed back
		case *expr.Immediate:
			parts = append(parts, fmt.Sprintf("imm(%x)", e.Data))
		case *expr.Verdict:
			parts = append(parts, fmt.Sprintf("verdict(%d,%s)", e.Kind, e.Chain))
		case *expr.Redir:
			parts = append(parts, "redir")
		case *expr.TProxy, *expr.Byteorder:
			// google/nftables does not parse these back from the kernel;
			// the range after a byteorder still shows its bounds.
		case *expr.Counter:
			parts = append(parts, "counter")
		default:
			parts = append(parts, fmt.Sprintf("%T", e))
		}
	}
	return strings.Join(parts, " ")
}
