package chart

import (
	"os"
	"sort"
	"strings"
	"testing"
)

// docs/permissions.md lists exactly the permissions the chart can grant:
// every (account, group, resource, verb) of every ClusterRole and Role
// rendered with each feature on, the `helm test` hooks' included, and the
// non-resource URLs of the metrics-reader role (account "scraper", group
// "non-resource URL").
func TestPermissionsDoc(t *testing.T) {
	rendered := map[string]bool{}
	for _, vals := range []map[string]any{
		{"repair": map[string]any{"policy": "evict"}, "startupTaint": map[string]any{"enabled": true}},
		{"repair": map[string]any{"policy": "delete"}},
		{"repair": map[string]any{"policy": "label"}},
		{"openshift": map[string]any{"scc": map[string]any{"enabled": true}}},
		{"metrics": map[string]any{"bindAddress": ""}},
	} {
		r, err := Render(chartDir, Options{Values: vals})
		if err != nil {
			t.Fatal(err)
		}
		// The `helm test` hooks too: their Role exists while the test runs.
		objs, err := Objects(r.Manifest + r.Tests)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if o.Kind != "ClusterRole" && o.Kind != "Role" {
				continue
			}
			account := "agent"
			switch {
			case strings.HasSuffix(o.Name, "-plugin"):
				account = "plugin"
			case strings.HasSuffix(o.Name, "-test"):
				account = "helm test"
			case strings.HasSuffix(o.Name, "-metrics-reader"):
				account = "scraper"
			}
			rules, _ := o.Raw["rules"].([]any)
			for _, x := range rules {
				rule := x.(map[string]any)
				for _, u := range strs(rule["nonResourceURLs"]) {
					for _, v := range strs(rule["verbs"]) {
						rendered[account+" non-resource URL "+u+" "+v] = true
					}
				}
				for _, g := range strs(rule["apiGroups"]) {
					if g == "" {
						g = "core"
					}
					for _, res := range strs(rule["resources"]) {
						for _, v := range strs(rule["verbs"]) {
							rendered[account+" "+g+" "+res+" "+v] = true
						}
					}
				}
			}
		}
	}

	b, err := os.ReadFile("../../docs/permissions.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
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
