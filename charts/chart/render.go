// Package chart renders the mesh-cni Helm chart the way `helm template` does,
// and writes the kustomize base generated from it. The tests in this package
// hold the chart, the kustomize tree and both Helm major versions together.
package chart

import (
	"fmt"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/manifest"
)

// The release a render defaults to (manifest's).
const (
	BaseRelease   = manifest.BaseRelease
	BaseNamespace = manifest.BaseNamespace
	KubeVersion   = manifest.KubeVersion
)

// Options says what to render.
type Options struct {
	Release   string         // default BaseRelease
	Namespace string         // default BaseNamespace
	Values    map[string]any // user values (as from -f), may be nil
	// KubeVersion is --kube-version; default the package's KubeVersion.
	KubeVersion string
	// APIVersions are --api-versions: API groups/versions (or
	// group/version/Kind) the cluster serves beyond Helm's defaults.
	APIVersions []string
	// Upgrade renders as `helm upgrade` does (.Release.IsUpgrade).
	Upgrade bool
}

// Rendered is the output of one render.
type Rendered struct {
	Manifest string // exactly what `helm template --skip-tests` prints
	Tests    string // the `helm test` hooks, in the same form
	Notes    string
}

// Render renders the chart in dir with its schema checked, and prints it as
// `helm template --kube-version KubeVersion` does: objects in install order,
// each after "---" and a "# Source:" line.
func Render(dir string, o Options) (*Rendered, error) {
	chrt, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", dir, err)
	}
	kv, err := chartutil.ParseKubeVersion(or(o.KubeVersion, KubeVersion))
	if err != nil {
		return nil, err
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = *kv
	caps.APIVersions = append(caps.APIVersions, o.APIVersions...)
	vals := o.Values
	if vals == nil {
		vals = map[string]any{}
	}
	if err := chartutil.ProcessDependenciesWithMerge(chrt, vals); err != nil {
		return nil, err
	}
	if chrt.Metadata.KubeVersion != "" && !chartutil.IsCompatibleRange(chrt.Metadata.KubeVersion, caps.KubeVersion.String()) {
		return nil, fmt.Errorf("chart requires kubeVersion %s, not %s", chrt.Metadata.KubeVersion, caps.KubeVersion)
	}
	top, err := chartutil.ToRenderValues(chrt, vals, chartutil.ReleaseOptions{
		Name:      or(o.Release, BaseRelease),
		Namespace: or(o.Namespace, BaseNamespace),
		Revision:  map[bool]int{false: 1, true: 2}[o.Upgrade],
		IsInstall: !o.Upgrade,
		IsUpgrade: o.Upgrade,
	}, caps)
	if err != nil {
		return nil, fmt.Errorf("values for chart %s: %w", dir, err)
	}
	files, err := engine.Render(chrt, top)
	if err != nil {
		return nil, fmt.Errorf("render chart %s: %w", dir, err)
	}
	notes := ""
	for name, content := range files {
		if strings.HasSuffix(name, "NOTES.txt") {
			if name == chrt.Name()+"/templates/NOTES.txt" {
				notes = content
			}
			delete(files, name)
		}
	}
	hooks, manifests, err := releaseutil.SortManifests(files, caps.APIVersions, releaseutil.InstallOrder)
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w", dir, err)
	}
	var b, tests strings.Builder
	for _, h := range hooks {
		if len(h.Events) != 1 || h.Events[0] != release.HookTest {
			return nil, fmt.Errorf("chart %s: %s: hooks other than `helm test` are not used by mesh-cni", dir, h.Path)
		}
		fmt.Fprintf(&tests, "---\n# Source: %s\n%s\n", h.Path, h.Manifest)
	}
	for _, m := range manifests {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", m.Name, m.Content)
	}
	return &Rendered{Manifest: b.String(), Tests: tests.String(), Notes: notes}, nil
}

// ReadValues reads a values file as `helm -f` does.
func ReadValues(path string) (map[string]any, error) {
	v, err := chartutil.ReadValuesFile(path)
	if err != nil {
		return nil, fmt.Errorf("read values %s: %w", path, err)
	}
	return v.AsMap(), nil
}

// Object is one rendered Kubernetes object.
type Object = manifest.Object

// Objects splits a manifest into its objects, in order.
func Objects(m string) ([]Object, error) { return manifest.Objects(m) }

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
