package backend_test

import (
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/rules"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// largeSpec is testSpec with n UID exemptions, each one rule in the nat
// OUTPUT chain, each with a port list (an anonymous set in nftables).
func largeSpec(n int) rules.Spec {
	s := testSpec(rules.Redirect)
	for i := range n {
		s.ExemptUIDs = append(s.ExemptUIDs, rules.UIDExemption{
			First: uint32(20000 + i), Last: uint32(20000 + i), Proto: rules.TCP,
			Ports: []rules.PortRange{{First: 1000, Last: 1000}, {First: uint16(2000 + i), Last: uint16(2000 + i)}},
		})
	}
	return s
}

// TestLargeRuleSet writes 2,000 rules through each backend in one
// transaction per family. The nftables batch outgrows netlink's default
// socket buffers (the kernel acknowledges and echoes every message before
// the first is read): it must still go in whole, and CHECK and DEL must
// work on it.
func TestLargeRuleSet(t *testing.T) {
	const exempt = 2000
	for _, name := range backends {
		t.Run(name, func(t *testing.T) {
			b := mustNew(t, name)
			n := testenv.NewNS(t)
			rs := rules.Generate(largeSpec(exempt))
			if err := b.Apply(n.Path(), rs); err != nil {
				t.Fatalf("Apply of %d rules: %v", countRules(rs), err)
			}
			if err := b.Check(n.Path(), rs); err != nil {
				t.Errorf("Check: %v", err)
			}
			if name == "nftables" {
				out, err := run(n, "nft", "list", "table", "inet", rules.NftTable)
				if err != nil {
					t.Fatalf("nft list: %v\n%s", err, out)
				}
				if got := strings.Count(out, "skuid"); got < exempt {
					t.Errorf("nft lists %d owner matches, want at least %d", got, exempt)
				}
			}
			// One exemption fewer: CHECK names the change.
			if err := b.Check(n.Path(), rules.Generate(largeSpec(exempt-1))); err == nil {
				t.Error("Check of a different rule set passed")
			}
			if err := b.Delete(n.Path()); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			expectClean(t, n)
		})
	}
}

func countRules(rs rules.RuleSet) int {
	n := 0
	for _, t := range rs.Tables {
		for _, c := range t.Chains {
			n += len(c.Rules)
		}
	}
	return n
}
