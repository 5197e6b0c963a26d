// Package helmcli renders the chart with the real `helm template` (Helm 3,
// built by hack/chart-tools.sh), for the product module's tests that check
// a binary against the chart: the product module links no Helm. The chart
// module (charts/chart) renders in-process and checks that both agree.
package helmcli

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"sigs.k8s.io/yaml"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/manifest"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// The release a render defaults to (manifest's).
const (
	BaseRelease   = manifest.BaseRelease
	BaseNamespace = manifest.BaseNamespace
	KubeVersion   = manifest.KubeVersion
)

// Options says what to render.
type Options struct {
	Release     string         // default BaseRelease
	Namespace   string         // default BaseNamespace
	Values      map[string]any // user values (as from -f), may be nil
	KubeVersion string         // --kube-version, default KubeVersion
	APIVersions []string       // --api-versions
	ValuesFiles []string       // -f, before Values
	Set         []string       // --set, in order, after every -f
}

// Rendered is the output of one render.
type Rendered struct {
	Manifest string // what `helm template --skip-tests` prints
}

var (
	helmOnce sync.Once
	helmBin  string
	helmErr  error
)

// helm builds (once, into the cache) and returns the Helm 3 CLI.
func helm() (string, error) {
	helmOnce.Do(func() {
		root, err := testenv.Root()
		if err != nil {
			helmErr = err
			return
		}
		out, err := exec.Command("bash", filepath.Join(root, "hack", "chart-tools.sh"), "helm").Output()
		if err != nil {
			helmErr = fmt.Errorf("hack/chart-tools.sh helm: %w", err)
			return
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		helmBin = filepath.Join(lines[len(lines)-1], "helm")
	})
	return helmBin, helmErr
}

// Render runs `helm template` on the chart in dir.
func Render(dir string, o Options) (*Rendered, error) {
	bin, err := helm()
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "helmcli-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	args := []string{"template", or(o.Release, BaseRelease), dir, "--namespace", or(o.Namespace, BaseNamespace),
		"--kube-version", or(o.KubeVersion, KubeVersion), "--skip-tests"}
	for _, v := range o.APIVersions {
		args = append(args, "--api-versions", v)
	}
	for _, f := range o.ValuesFiles {
		args = append(args, "-f", f)
	}
	if o.Values != nil {
		b, err := json.Marshal(o.Values)
		if err != nil {
			return nil, fmt.Errorf("values: %w", err)
		}
		f := filepath.Join(tmp, "values.json")
		if err := os.WriteFile(f, b, 0o600); err != nil {
			return nil, err
		}
		args = append(args, "-f", f)
	}
	for _, v := range o.Set {
		args = append(args, "--set", v)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+tmp, "HELM_CONFIG_HOME="+tmp, "HELM_DATA_HOME="+tmp)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return &Rendered{Manifest: string(out)}, nil
}

// ReadValues reads a values file.
func ReadValues(path string) (map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	v := map[string]any{}
	if err := yaml.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("read values %s: %w", path, err)
	}
	return v, nil
}

// Object is one rendered Kubernetes object.
type Object = manifest.Object

// Objects splits a manifest into its objects, in order.
func Objects(m string) ([]Object, error) { return manifest.Objects(m) }

// ContainerArgs renders the chart in dir with o and returns the args of the
// DaemonSet container named container, as the chart writes them: the tests
// that hold a binary's flag defaults to what the chart passes start here.
func ContainerArgs(dir string, o Options, container string) ([]string, error) {
	r, err := Render(dir, o)
	if err != nil {
		return nil, err
	}
	objs, err := Objects(r.Manifest)
	if err != nil {
		return nil, err
	}
	for _, obj := range objs {
		if obj.Kind != "DaemonSet" {
			continue
		}
		spec, _ := obj.Raw["spec"].(map[string]any)
		tmpl, _ := spec["template"].(map[string]any)
		pod, _ := tmpl["spec"].(map[string]any)
		cs, _ := pod["containers"].([]any)
		for _, c := range cs {
			if c, _ := c.(map[string]any); c["name"] == container {
				list, _ := c["args"].([]any)
				args := make([]string, 0, len(list))
				for _, a := range list {
					s, _ := a.(string)
					args = append(args, s)
				}
				return args, nil
			}
		}
	}
	return nil, fmt.Errorf("no DaemonSet container %q in the chart rendered with %v", container, o.Values)
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
