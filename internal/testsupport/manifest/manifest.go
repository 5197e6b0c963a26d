// Package manifest is what the chart's two renderers share: the chart
// module's in-process render (charts/chart) and the product module's
// `helm template` (helmcli), so the product module shares it without
// linking Helm. It holds the release a render defaults to and splits a
// rendered chart into its objects.
package manifest

import (
	"fmt"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// Release name, namespace and Kubernetes version a render defaults to (the
// kustomize base and the golden file are rendered with them).
const (
	BaseRelease   = "mesh-cni"
	BaseNamespace = "mesh-cni"
	KubeVersion   = "v1.34.0"
)

// Object is one rendered Kubernetes object.
type Object struct {
	Source string // template path, from the "# Source:" comment
	Kind   string
	Name   string
	Raw    map[string]any
}

// Objects splits a manifest into its objects, in order.
func Objects(manifest string) ([]Object, error) {
	var out []Object
	for _, m := range docSep.Split(manifest, -1) {
		src := ""
		if i := strings.Index(m, "# Source: "); i >= 0 {
			src = strings.TrimSpace(strings.SplitN(m[i+len("# Source: "):], "\n", 2)[0])
		}
		var raw map[string]any
		if err := yaml.Unmarshal([]byte(m), &raw); err != nil {
			return nil, fmt.Errorf("%s: %w", src, err)
		}
		if raw == nil {
			continue
		}
		meta, _ := raw["metadata"].(map[string]any)
		name, _ := meta["name"].(string)
		kind, _ := raw["kind"].(string)
		out = append(out, Object{Source: src, Kind: kind, Name: name, Raw: raw})
	}
	return out, nil
}

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// FileName is the name of an object's file in the kustomize base.
func (o Object) FileName() string {
	return strings.ToLower(o.Kind) + "-" + o.Name + ".yaml"
}
