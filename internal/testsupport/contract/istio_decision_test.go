package contract

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/mesh-cni/mesh-cni/internal/mesh"
	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// istioGoldens returns the injected pods Istio's own injector wrote
// (hack/istio-goldens.sh), by file name.
func istioGoldens(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no injected pods in %s", dir)
	}
	out := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = b
	}
	return out
}

// istioOwn names the containers Istio injects; every other container is the
// application's.
var istioOwn = map[string]bool{"istio-proxy": true, "istio-validation": true}

// TestIstioInjectedPodsDecision feeds every pod Istio's injector produced
// through the plugin's decision, as the plugin reads API pods and as it reads
// runtime annotations alone, and checks the identity contract: the exempt
// UID is the one istio-proxy runs with, and no app identity is exempt.
func TestIstioInjectedPodsDecision(t *testing.T) {
	meshes := map[string]mesh.Config{mesh.Istio: {}}
	for name, raw := range istioGoldens(t, "testdata/istio") {
		t.Run(strings.TrimSuffix(name, ".yaml"), func(t *testing.T) {
			var pod corev1.Pod
			if err := yaml.Unmarshal(raw, &pod); err != nil {
				t.Fatalf("decode %s: %v", name, err)
			}
			var api mesh.APIPod
			if err := yaml.Unmarshal(raw, &api); err != nil {
				t.Fatalf("decode %s as the plugin does: %v", name, err)
			}
			var proxy *corev1.Container
			var apps []*corev1.Container
			for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
				for i := range list {
					c := &list[i]
					switch {
					case c.Name == "istio-proxy":
						proxy = c
					case !istioOwn[c.Name]:
						apps = append(apps, c)
					}
				}
			}
			if proxy == nil {
				t.Fatalf("%s: Istio injected no istio-proxy container", name)
			}
			for _, c := range pod.Spec.InitContainers {
				if c.Name == "istio-init" {
					t.Fatalf("%s: istio-init present; the goldens must be made with CNI mode on", name)
				}
			}
			// The images' own users do not matter here: the injector pins
			// the proxy's identity, and an app's unpinned one is unknown to
			// the plugin.
			proxyID, err := Kubelet(&pod, proxy.Name, Image{})
			if err != nil {
				t.Fatal(err)
			}
			if !proxyID.UIDPinned {
				t.Fatalf("%s: istio-proxy has no runAsUser", name)
			}
			var proxyGID *int64
			if proxyID.GIDPinned {
				proxyGID = ptr(int64(proxyID.GID))
			}

			paths := map[string]mesh.Pod{
				"api":                 api.Pod(),
				"runtime-annotations": {Namespace: pod.Namespace, Name: pod.Name, Annotations: pod.Annotations},
			}
			for path, mp := range paths {
				d, err := mesh.Decide(meshes, mp, nil)
				if err != nil {
					t.Fatalf("%s: Decide: %v", path, err)
				}
				if d.NeedSpec {
					// The plugin then reads the spec: the API path covers it.
					if path == "api" {
						t.Fatalf("api: asked for the spec it was given")
					}
					continue
				}
				if !d.Meshed || d.Mesh != mesh.Istio {
					t.Fatalf("%s: decision %+v, want meshed by istio", path, d)
				}
				checkIstioIdentity(t, path, d.Spec, &pod, int64(proxyID.UID), proxyGID, apps)
				checkIstioOutbound(t, path, d.Spec, &pod, proxy)
			}
		})
	}
}

func checkIstioIdentity(t *testing.T, path string, s *rules.Spec, pod *corev1.Pod, proxyUID int64, proxyGID *int64, apps []*corev1.Container) {
	t.Helper()
	switch {
	case proxyUID == 0:
		// TPROXY: Istio runs the proxy as root with group 1337. Root is
		// never exempt (that would exempt every root process); the group is.
		if s.ProxyUID == 0 {
			t.Errorf("%s: UID 0 is exempt", path)
		}
		if proxyGID == nil || s.ProxyGID == nil || int64(*s.ProxyGID) != *proxyGID {
			t.Errorf("%s: istio-proxy runs as root with group %s, but the exempt GID is %s", path, show(proxyGID), show(s.ProxyGID))
		}
	case int64(s.ProxyUID) != proxyUID:
		t.Errorf("%s: exempt UID %d, but istio-proxy runs as %d", path, s.ProxyUID, proxyUID)
	}
	if s.ProxyGID != nil && proxyGID != nil && int64(*s.ProxyGID) != *proxyGID {
		t.Errorf("%s: exempt GID %d, but istio-proxy runs with group %d", path, *s.ProxyGID, *proxyGID)
	}
	for _, c := range apps {
		id, err := Kubelet(pod, c.Name, Image{})
		if err != nil {
			t.Fatal(err)
		}
		if id.UIDPinned && id.UID == s.ProxyUID {
			t.Errorf("%s: app container %q runs as UID %d, which is exempt", path, c.Name, id.UID)
		}
		if id.GIDPinned && s.ProxyGID != nil && id.GID == *s.ProxyGID {
			t.Errorf("%s: app container %q runs with GID %d, which is exempt", path, c.Name, id.GID)
		}
	}
}

func show[T int64 | uint32](v *T) string {
	if v == nil {
		return "none"
	}
	return fmt.Sprint(*v)
}

// checkIstioOutbound checks what Istio's own CNI plugin reads besides the
// identity (istio.io/istio cni/pkg/plugin/sidecar_redirect.go NewRedirect):
// excludeOutboundPorts defaults to the status port 15020, and DNS capture
// comes from ISTIO_META_DNS_CAPTURE in istio-proxy's environment.
func checkIstioOutbound(t *testing.T, path string, s *rules.Spec, pod *corev1.Pod, proxy *corev1.Container) {
	t.Helper()
	want, ok := pod.Annotations["traffic.sidecar.istio.io/excludeOutboundPorts"]
	if !ok {
		want = "15020"
	}
	for _, f := range strings.Split(want, ",") {
		p, err := strconv.ParseUint(strings.TrimSpace(f), 10, 16)
		if err != nil {
			t.Fatalf("excludeOutboundPorts %q: %v", want, err)
		}
		if !slices.ContainsFunc(s.IgnoreOutbound, func(r rules.PortRange) bool {
			return p >= uint64(r.First) && p <= uint64(r.Last)
		}) {
			t.Errorf("%s: outbound port %d is redirected; Istio excludes it (%v excluded)", path, p, s.IgnoreOutbound)
		}
	}
	dns := false
	for _, e := range proxy.Env {
		if e.Name == "ISTIO_META_DNS_CAPTURE" {
			dns, _ = strconv.ParseBool(e.Value)
		}
	}
	if s.CaptureDNS != dns {
		t.Errorf("%s: DNS capture %t, but istio-proxy has ISTIO_META_DNS_CAPTURE=%t", path, s.CaptureDNS, dns)
	}
}
