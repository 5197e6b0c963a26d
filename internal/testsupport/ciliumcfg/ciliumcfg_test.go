package ciliumcfg

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/helmcli"
)

// The values the e2e installs Cilium with run the images
// hack/build-cilium.sh builds for the pinned version, render no Envoy
// DaemonSet (it is not built), and keep socket LB and the kube-proxy
// replacement off: on a host whose processes share one cgroup2 root they
// would hook every process's connect() (hack/cilium/README.md).
func TestKindValues(t *testing.T) {
	root := filepath.Join("..", "..", "..", "..")
	dir, err := ChartDir(root, false)
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("%v: not in the module cache (hack/build-cilium.sh or go generate ./internal/ctl/check fetch it)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	v, err := Version(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range Cases {
		if c.Values != KindValues {
			continue
		}
		m, err := Manifest(root, dir, c)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := helmcli.Objects(m)
		if err != nil {
			t.Fatal(err)
		}
		images := map[string]string{}
		for _, o := range objs {
			if o.Kind == "DaemonSet" || o.Kind == "Deployment" {
				images[o.Kind+"/"+o.Name] = podImages(o.Raw)
			}
			if o.Kind == "ConfigMap" && o.Name == "cilium-config" {
				data, _ := o.Raw["data"].(map[string]any)
				for _, k := range []string{"kube-proxy-replacement", "bpf-lb-sock"} {
					if data[k] != "false" {
						t.Errorf("%s: %s: %v, want false", c.Name, k, data[k])
					}
				}
			}
		}
		want := map[string]string{
			"DaemonSet/cilium":           "mesh-cni.local/cilium:" + v,
			"Deployment/cilium-operator": "mesh-cni.local/cilium-operator-generic:" + v,
		}
		for k, img := range want {
			if got := images[k]; got != img {
				t.Errorf("%s: %s runs %q, want only %q", c.Name, k, got, img)
			}
		}
		if len(images) != len(want) {
			t.Errorf("%s: workloads %v, want only %v (no Envoy, Hubble or other images that are not built)", c.Name, images, want)
		}
	}
}

// podImages lists the distinct images of a workload's pod template.
func podImages(raw map[string]any) string {
	spec, _ := raw["spec"].(map[string]any)
	tmpl, _ := spec["template"].(map[string]any)
	pod, _ := tmpl["spec"].(map[string]any)
	seen := map[string]bool{}
	var out []string
	for _, key := range []string{"initContainers", "containers"} {
		cs, _ := pod[key].([]any)
		for _, c := range cs {
			img, _ := c.(map[string]any)["image"].(string)
			if !seen[img] {
				seen[img] = true
				out = append(out, img)
			}
		}
	}
	return strings.Join(out, " ")
}
