package policy

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/mesh-cni/mesh-cni/internal/rules"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// newNetns is a fresh netns with lo down, as a pod's is before the
// runtime's loopback plugin ran.
func newNetns(t *testing.T) (ns.NetNS, *os.File) {
	t.Helper()
	n := testenv.NewNS(t)
	f, err := os.Open(n.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return n, f
}

// ip runs iproute2 in the netns: the kernel's view, read by another tool.
func ip(t *testing.T, n ns.NetNS, args ...string) string {
	t.Helper()
	out, err := exec.Command("nsenter", append([]string{"--net=" + n.Path(), "ip"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// oursIn keeps the lines of ip's output that carry our protocol. (iproute2
// 6.1 does not filter "ip rule show" by protocol.)
func oursIn(out string) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "proto 109") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

func tproxySet(fams ...rules.Family) rules.RuleSet {
	// 133 fits the 8-bit header field; 3000 needs the TABLE attribute.
	return rules.RuleSet{Families: fams, PolicyRoutes: []rules.PolicyRoute{{Mark: 0x539, Table: 133}, {Mark: 0x1000, Table: 3000}}}
}

func TestApplyCheckDelete(t *testing.T) {
	n, f := newNetns(t)
	// Someone else's rule and route: never touched.
	ip(t, n, "link", "set", "lo", "up")
	ip(t, n, "rule", "add", "fwmark", "7", "lookup", "77")
	ip(t, n, "route", "add", "local", "default", "dev", "lo", "table", "77")
	ip(t, n, "link", "set", "lo", "down")

	rs := tproxySet(rules.IPv4, rules.IPv6)
	if err := Apply(f, rs); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ip(t, n, "link", "show", "lo"), ",UP") {
		t.Error("lo was left down")
	}
	for _, fam := range []string{"-4", "-6"} {
		rulesOut := oursIn(ip(t, n, fam, "rule", "show"))
		for _, want := range []string{"fwmark 0x539 lookup 133 proto 109", "fwmark 0x1000 lookup 3000 proto 109"} {
			if !strings.Contains(rulesOut, want) {
				t.Errorf("ip %s rule: no %q in\n%s", fam, want, rulesOut)
			}
		}
		for _, table := range []string{"133", "3000"} {
			routes := ip(t, n, fam, "route", "show", "table", table)
			if !strings.Contains(routes, "local default dev lo proto 109") {
				t.Errorf("ip %s route table %s: %q", fam, table, routes)
			}
		}
	}
	if err := Check(f, rs); err != nil {
		t.Errorf("Check after Apply: %v", err)
	}
	// Apply again: the same rules, once each.
	if err := Apply(f, rs); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(oursIn(ip(t, n, "-4", "rule", "show")), "fwmark"); got != 2 {
		t.Errorf("after a second Apply: %d IPv4 rules of ours, want 2", got)
	}
	// A route removed behind our back is named by Check.
	ip(t, n, "-6", "route", "del", "local", "default", "dev", "lo", "table", "3000")
	if err := Check(f, rs); err == nil || !strings.Contains(err.Error(), "ipv6 route local default dev lo table 3000 is missing") {
		t.Errorf("Check without the route: %v", err)
	}
	ip(t, n, "-4", "rule", "del", "fwmark", "0x539", "lookup", "133")
	if err := Check(f, rs); err == nil || !strings.Contains(err.Error(), "ipv4 ip rule fwmark 0x539 lookup 133 is missing") {
		t.Errorf("Check without the rule: %v", err)
	}
	// Delete finds routes through our rules: put them back first.
	if err := Apply(f, rs); err != nil {
		t.Fatal(err)
	}

	if err := Delete(f); err != nil {
		t.Fatal(err)
	}
	for _, fam := range []string{"-4", "-6"} {
		if out := oursIn(ip(t, n, fam, "rule", "show")); out != "" {
			t.Errorf("ip %s rule after Delete:\n%s", fam, out)
		}
		if out := oursIn(ip(t, n, fam, "route", "show", "table", "all")); out != "" {
			t.Errorf("ip %s route after Delete:\n%s", fam, out)
		}
	}
	if out := ip(t, n, "-4", "rule", "show"); !strings.Contains(out, "fwmark 0x7 lookup 77") {
		t.Errorf("someone else's rule is gone:\n%s", out)
	}
	if out := ip(t, n, "-4", "route", "show", "table", "77"); !strings.Contains(out, "local default dev lo") {
		t.Errorf("someone else's route is gone: %q", out)
	}
	// Nothing of ours left: Delete succeeds again, Apply of no routes too.
	if err := Delete(f); err != nil {
		t.Errorf("second Delete: %v", err)
	}
	if err := Apply(f, rules.RuleSet{Families: []rules.Family{rules.IPv4}}); err != nil {
		t.Errorf("Apply without policy routes: %v", err)
	}
	if err := Check(f, rules.RuleSet{Families: []rules.Family{rules.IPv4}}); err != nil {
		t.Errorf("Check without policy routes: %v", err)
	}
}

// An IPv4-only pod gets IPv4 rules only.
func TestApplyOneFamily(t *testing.T) {
	n, f := newNetns(t)
	if err := Apply(f, tproxySet(rules.IPv4)); err != nil {
		t.Fatal(err)
	}
	if out := oursIn(ip(t, n, "-6", "rule", "show")); out != "" {
		t.Errorf("IPv6 rules for an IPv4 pod:\n%s", out)
	}
	if err := Check(f, tproxySet(rules.IPv4, rules.IPv6)); err == nil || !strings.Contains(err.Error(), "ipv6 ip rule") {
		t.Errorf("Check of both families: %v", err)
	}
}
