package iptables

import (
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/backend/finding"
	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// report matches iptables-save output (parsed) with the rendered rule set
// rule by rule: present when the netns has it, missing when not, extra
// for a rule or chain of ours the set lacks. The kernel and the binaries
// are the integration tests' (TestBackends with the iptables variants);
// here the save output is the rendered input itself, edited.
func TestReportIptables(t *testing.T) {
	rs := rules.Generate(rules.Spec{Families: []rules.Family{rules.IPv4}, Mode: rules.Redirect,
		InboundPort: 15006, OutboundPort: 15001, ProxyUID: 1337})
	text := rules.IptablesRestore(rs, rules.IPv4)
	want, err := parse(text)
	if err != nil {
		t.Fatal(err)
	}
	have, err := parse(text)
	if err != nil {
		t.Fatal(err)
	}
	fs := report("ipv4", want, have)
	if finding.Count(fs, finding.Present) < 5 || finding.Count(fs, finding.Missing) != 0 || finding.Count(fs, finding.Extra) != 0 {
		t.Fatalf("the same rules: %+v", fs)
	}

	// The outbound redirect gone, a rule of ours added in its place, and a
	// chain of ours the set lacks.
	var edited []string
	for _, l := range strings.Split(text, "\n") {
		switch {
		case strings.Contains(l, "--to-ports 15001"):
			edited = append(edited, strings.Replace(l, "--to-ports 15001", "--to-ports 16001", 1))
		case l == "COMMIT":
			edited = append(edited, ":MESH_OLD - [0:0]", l)
		default:
			edited = append(edited, l)
		}
	}
	if have, err = parse(strings.Join(edited, "\n")); err != nil {
		t.Fatal(err)
	}
	fs = report("ipv4", want, have)
	var missing, extra []string
	for _, f := range fs {
		if f.Family != "ipv4" || f.Table == "" || f.Rule == "" {
			t.Errorf("finding %+v", f)
		}
		switch f.State {
		case finding.Missing:
			missing = append(missing, f.Rule)
		case finding.Extra:
			extra = append(extra, f.Rule)
		}
	}
	if len(missing) != 1 || !strings.Contains(missing[0], "--to-ports 15001") {
		t.Errorf("missing %q, want the 15001 redirect", missing)
	}
	if len(extra) != 2 || !strings.Contains(strings.Join(extra, "\n"), "--to-ports 16001") || !strings.Contains(strings.Join(extra, "\n"), ":MESH_OLD") {
		t.Errorf("extra %q, want the 16001 redirect and chain MESH_OLD", extra)
	}
}
