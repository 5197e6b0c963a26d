package docs_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/mesh-cni/mesh-cni/charts/chart"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/doctest"
)

// The startup-taint examples in install.md are what the chart does: the
// Karpenter NodePool's startup taint is the chart's default key with the
// effect the agent removes, and each cluster-autoscaler key, set in the
// chart, is the taint the agent is told to remove and carries a prefix the
// autoscaler filters out.
func TestStartupTaintExamples(t *testing.T) {
	blocks, err := doctest.Parse("install.md")
	if err != nil {
		t.Fatal(err)
	}
	defaults, err := chart.ReadValues("../charts/mesh-cni/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defaultKey, _ := defaults["startupTaint"].(map[string]any)["key"].(string)
	pools, keys := 0, 0
	caKey := regexp.MustCompile(`--set startupTaint\.key=(\S+)`)
	for _, b := range blocks {
		switch {
		case b.Lang == "yaml" && strings.Contains(b.Body, "kind: NodePool"):
			pools++
			var np struct {
				APIVersion string `json:"apiVersion"`
				Spec       struct {
					Template struct {
						Spec struct {
							NodeClassRef  map[string]string `json:"nodeClassRef"`
							StartupTaints []struct {
								Key, Value, Effect string
							} `json:"startupTaints"`
						} `json:"spec"`
					} `json:"template"`
				} `json:"spec"`
			}
			if err := yaml.Unmarshal([]byte(b.Body), &np); err != nil {
				t.Fatalf("install.md:%d: %v", b.Line, err)
			}
			st := np.Spec.Template.Spec.StartupTaints
			if np.APIVersion != "karpenter.sh/v1" || np.Spec.Template.Spec.NodeClassRef["name"] == "" {
				t.Errorf("install.md:%d: not a karpenter.sh/v1 NodePool with a nodeClassRef", b.Line)
			}
			if len(st) != 1 || st[0].Key != defaultKey || st[0].Effect != "NoSchedule" {
				t.Errorf("install.md:%d: startupTaints %+v, want the chart's key %s with effect NoSchedule", b.Line, st, defaultKey)
			}
		case b.Lang == "sh":
			for _, m := range caKey.FindAllStringSubmatch(b.Body, -1) {
				keys++
				key := m[1]
				if !strings.HasPrefix(key, "startup-taint.cluster-autoscaler.kubernetes.io/") && !strings.HasPrefix(key, "ignore-taint.cluster-autoscaler.kubernetes.io/") {
					t.Errorf("install.md:%d: %s has no prefix the cluster-autoscaler filters out", b.Line, key)
				}
				r, err := chart.Render("../charts/mesh-cni", chart.Options{Values: map[string]any{
					"startupTaint": map[string]any{"enabled": true, "key": key}}})
				if err != nil {
					t.Fatalf("install.md:%d: %v", b.Line, err)
				}
				if !strings.Contains(r.Manifest, "- --startup-taint="+key+"\n") {
					t.Errorf("install.md:%d: the agent is not told to remove %s", b.Line, key)
				}
			}
		}
	}
	if pools != 1 || keys != 2 {
		t.Errorf("install.md: %d NodePool examples and %d autoscaler keys, want 1 and 2", pools, keys)
	}
	doc, err := os.ReadFile("install.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "--register-with-taints="+defaultKey+"=:NoSchedule") {
		t.Errorf("install.md does not show the kubelet flag with the chart's key %s", defaultKey)
	}
}
