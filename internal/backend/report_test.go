package backend_test

import (
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/backend"
	"github.com/mesh-cni/mesh-cni/internal/backend/finding"
	"github.com/mesh-cni/mesh-cni/internal/rules"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// Report, with each backend, in a real netns: everything present after
// Apply; after a tamper (the same as TestCheckNamesWhatIsMissing's), the
// rules it removed are missing, all in that chain, and nothing else; the
// netns is not changed by the report.
func TestReportAfterTamper(t *testing.T) {
	tamper := map[string][]string{
		backend.NFTables:       {"nft", "flush", "chain", "inet", rules.NftTable, rules.ChainOutput},
		backend.IptablesNFT:    {"ip6tables-nft", "-t", "nat", "-D", rules.ChainOutput, "1"},
		backend.IptablesLegacy: {"iptables-legacy", "-t", "nat", "-D", rules.ChainOutput, "1"},
	}
	for _, name := range backends {
		t.Run(name, func(t *testing.T) {
			b, err := backend.New(name)
			if err != nil {
				t.Skipf("%s cannot run here: %v", name, err)
			}
			n := testenv.NewNS(t)
			rs := rules.Generate(testSpec(rules.Redirect))
			if err := b.Apply(n.Path(), rs); err != nil {
				t.Fatal(err)
			}
			used, fs, err := backend.Report(name, n.Path(), rs)
			if err != nil || used != name {
				t.Fatalf("Report: %s, %v", used, err)
			}
			present := finding.Count(fs, finding.Present)
			if present == 0 || len(fs) != present {
				t.Fatalf("after Apply: %+v", fs)
			}
			cmd := tamper[name]
			if out, err := run(n, cmd[0], cmd[1:]...); err != nil {
				t.Fatalf("tamper %v: %v\n%s", cmd, err, out)
			}
			for i := 0; i < 2; i++ { // twice: the first report changed nothing
				_, fs, err = backend.Report(name, n.Path(), rs)
				if err != nil {
					t.Fatal(err)
				}
				missing := finding.Count(fs, finding.Missing)
				if missing == 0 || finding.Count(fs, finding.Extra) != 0 || finding.Count(fs, finding.Present) != present-missing {
					t.Fatalf("after %v: %+v", cmd, fs)
				}
				for _, f := range fs {
					if f.State == finding.Missing && f.Chain != rules.ChainOutput {
						t.Errorf("missing outside %s: %+v", rules.ChainOutput, f)
					}
				}
			}
			if err := b.Check(n.Path(), rs); err == nil {
				t.Error("Check passes where Report finds rules missing")
			}
		})
	}
}
