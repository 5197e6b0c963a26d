package chart

import (
	"os"
	"sort"
	"strings"
	"testing"
)

// everyGrant renders, between them, every role and rule the chart can
// grant: each repair policy, the startup taint, OpenShift's SCC, and metrics
// served beyond loopback (token reviews and the metrics-reader role).
var everyGrant = []map[string]any{
	{"repair": map[string]any{"policy": "evict"}, "startupTaint": map[string]any{"enabled": true}},
	{"repair": map[string]any{"policy": "delete"}},
	{"repair": map[string]any{"policy": "label"}},
	{"openshift": map[string]any{"scc": map[string]any{"enabled": true}}},
	{"metrics": map[string]any{"bindAddress": ""}},
}

// docs/permissions.md lists exactly the permissions the chart can grant:
// every (account, group, resource, verb) of every ClusterRole and Role
// rendered with each feature on, the `helm test` hooks' included, and the
// non-resource URLs of the metrics-reader role (account "scraper", group
// "non-resource URL").
func TestPermissionsDoc(t *testing.T) {
	rendered := map[string]bool{}
	// The `helm test` hooks too: their Role exists while the test runs.
	for _, o := range renderEveryGrant(t, true) {
		if o.Kind != "ClusterRole" && o.Kind != "Role" {
			continue
		}
		account := roleAccount(o.Name)
		rules, _ := o.Raw["rules"].([]any)
		for _, x := range rules {
			rule := x.(map[string]any)
			for _, u := range strs(rule["nonResourceURLs"]) {
				for _, v := range strs(rule["verbs"]) {
					rendered[account+" non-resource URL "+u+" "+v] = true
				}
			}
		}
		eachRule(rules, "verbs", func(g, res, v string) { rendered[account+" "+g+" "+res+" "+v] = true })
	}
	documented := map[string]bool{}
	for _, line := range strings.Split(permissionsDoc(t), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 6 || !strings.HasPrefix(line, "| agent") && !strings.HasPrefix(line, "| plugin") && !strings.HasPrefix(line, "| helm test") && !strings.HasPrefix(line, "| scraper") {
			continue
		}
		account, g, res := strings.TrimSpace(cells[1]), strings.TrimSpace(cells[2]), strings.TrimSpace(cells[3])
		for _, v := range strings.Split(cells[4], ",") {
			documented[account+" "+g+" "+res+" "+strings.TrimSpace(v)] = true
		}
	}
	if len(rendered) == 0 {
		t.Fatal("no rules rendered")
	}
	for _, k := range sorted(rendered) {
		if !documented[k] {
			t.Errorf("granted but not in docs/permissions.md: %s", k)
		}
	}
	for _, k := range sorted(documented) {
		if !rendered[k] {
			t.Errorf("in docs/permissions.md but never granted: %s", k)
		}
	}
}

// docs/permissions.md says, for every write the chart can grant the agent,
// whether the admission policy matches it and what it allows and refuses;
// its "policy" column must be what the rendered policy matches.
func TestPermissionsDocPolicy(t *testing.T) {
	writes := map[string]bool{} // "group resource verb" of the agent's write rules
	matched := map[string]bool{}
	for _, o := range renderEveryGrant(t, false) {
		switch {
		case o.Kind == "ValidatingAdmissionPolicy":
			spec, _ := o.Raw["spec"].(map[string]any)
			mc, _ := spec["matchConstraints"].(map[string]any)
			eachRule(mc["resourceRules"], "operations", func(g, res, op string) { matched[g+" "+res+" "+op] = true })
		case (o.Kind == "ClusterRole" || o.Kind == "Role") && !strings.Contains(o.Name, "-plugin") &&
			!strings.HasSuffix(o.Name, "-metrics-reader"):
			eachRule(o.Raw["rules"], "verbs", func(g, res, v string) {
				if v != "get" && v != "list" && v != "watch" {
					writes[g+" "+res+" "+v] = true
				}
			})
		}
	}
	if len(matched) == 0 || len(writes) == 0 {
		t.Fatalf("rendered no policy (%d) or no write rules (%d)", len(matched), len(writes))
	}
	// The admission operation of each verb.
	op := map[string]string{"create": "CREATE", "patch": "UPDATE", "update": "UPDATE", "delete": "DELETE"}

	documented := map[string]bool{}
	in := false
	for _, line := range strings.Split(permissionsDoc(t), "\n") {
		if strings.HasPrefix(line, "| API group | resource | verbs | policy |") {
			in = true
			continue
		}
		if !in || strings.HasPrefix(line, "|---") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 7 {
			in = false
			continue
		}
		g, res, policy := strings.TrimSpace(cells[1]), strings.TrimSpace(cells[2]), strings.TrimSpace(cells[4])
		for _, v := range strings.Split(cells[3], ",") {
			v = strings.TrimSpace(v)
			key := g + " " + res + " " + v
			documented[key] = true
			if !writes[key] {
				t.Errorf("docs/permissions.md policy table: %s is not a write the chart grants the agent", key)
			}
			if got := matched[g+" "+res+" "+op[v]]; got != (policy == "yes") {
				t.Errorf("docs/permissions.md policy table: %s says policy %q; the rendered policy matches it: %v", key, policy, got)
			}
		}
	}
	for _, k := range sorted(writes) {
		if !documented[k] {
			t.Errorf("the chart grants the agent %s, which the policy table of docs/permissions.md does not list", k)
		}
	}
}

// renderEveryGrant is every object the chart renders with each of
// everyGrant's values, and with withTests its `helm test` hooks too.
func renderEveryGrant(t *testing.T, withTests bool) []Object {
	t.Helper()
	var out []Object
	for _, vals := range everyGrant {
		r, err := Render(chartDir, Options{Values: vals})
		if err != nil {
			t.Fatal(err)
		}
		m := r.Manifest
		if withTests {
			m += r.Tests
		}
		objs, err := Objects(m)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, objs...)
	}
	return out
}

// roleAccount is the account column of docs/permissions.md for a role.
func roleAccount(role string) string {
	switch {
	case strings.HasSuffix(role, "-plugin"):
		return "plugin"
	case strings.HasSuffix(role, "-test"):
		return "helm test"
	case strings.HasSuffix(role, "-metrics-reader"):
		return "scraper"
	}
	return "agent"
}

// eachRule calls fn for every (group, resource, verb) of rules, a list of
// RBAC rules (field "verbs") or of a policy's resourceRules (field
// "operations"); the core group is "core".
func eachRule(rules any, field string, fn func(g, res, v string)) {
	list, _ := rules.([]any)
	for _, x := range list {
		rule := x.(map[string]any)
		for _, g := range strs(rule["apiGroups"]) {
			for _, res := range strs(rule["resources"]) {
				for _, v := range strs(rule[field]) {
					fn(group(g), res, v)
				}
			}
		}
	}
}

func permissionsDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/permissions.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func group(g string) string {
	if g == "" {
		return "core"
	}
	return g
}

func strs(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, x := range l {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

func sorted(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Below 1.30 the own-node policy cannot be enforced: the chart renders none
// and says so.
func TestOwnNodePolicyNeedsKube130(t *testing.T) {
	for v, want := range map[string]bool{"v1.29.9": false, "v1.30.0": true, "v1.34.0": true} {
		r, err := Render(chartDir, Options{KubeVersion: v})
		if err != nil {
			t.Fatal(err)
		}
		objs, err := Objects(r.Manifest)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, o := range objs {
			if strings.HasPrefix(o.Kind, "ValidatingAdmissionPolicy") {
				n++
			}
		}
		says := strings.Contains(r.Notes, "cannot enforce the ValidatingAdmissionPolicy")
		if (n == 2) != want || says == want {
			t.Errorf("%s: %d policy objects, NOTES warns %v; want policy %v", v, n, says, want)
		}
	}
}
