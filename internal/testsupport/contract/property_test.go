package contract

import (
	"math/rand/v2"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/mesh"
)

// ids are the values the generator draws: root, an app ID, the four
// meshes' proxy IDs and an OpenShift-range ID.
var ids = []int64{0, 1000, 1337, 2102, 5678, 5995, 1000650000}

const istioStatus = `{"initContainers":["istio-validation"],"containers":["istio-proxy"]}`

// genPod builds an injected pod and its images' default identities from
// choices: pick(n) returns 0..n-1.
func genPod(pick func(n int) int) (*mesh.APIPod, map[string]Image) {
	id := func() *int64 {
		if i := pick(len(ids) + 1); i < len(ids) {
			return &ids[i]
		}
		return nil
	}
	sc := func() *mesh.APISecurityContext {
		if pick(4) == 0 {
			return nil
		}
		return &mesh.APISecurityContext{RunAsUser: id(), RunAsGroup: id()}
	}
	p := &mesh.APIPod{}
	p.Metadata.Namespace, p.Metadata.Name = "ns", "p"
	p.Spec.SecurityContext = sc()
	proxy := mesh.APIContainer{Name: "linkerd-proxy", SecurityContext: sc()}
	p.Metadata.Annotations = map[string]string{mesh.LinkerdProxyVersion: "edge-24.11.8"}
	switch pick(4) {
	case 1:
		proxy.Name = "istio-proxy"
		p.Metadata.Annotations = map[string]string{mesh.IstioStatus: istioStatus}
	case 2:
		proxy.Name = "kuma-sidecar"
		p.Metadata.Annotations = map[string]string{mesh.KumaSidecarInjected: "true"}
	case 3:
		proxy.Name = "consul-dataplane"
		p.Metadata.Annotations = map[string]string{mesh.ConsulInjectStatus: "injected", mesh.ConsulTProxyStatus: "enabled",
			mesh.ConsulRedirectConfig: `{"ProxyUserID":"5995","ProxyInboundPort":20000,"ProxyOutboundPort":15001,"ExcludeUIDs":["5996"]}`}
	}
	apps := []mesh.APIContainer{{Name: "app", SecurityContext: sc()}}
	if pick(2) == 0 {
		apps = append(apps, mesh.APIContainer{Name: "helper", SecurityContext: sc()})
	}
	//nolint:gocritic // a new list: the apps, then the proxy
	p.Spec.Containers = append(apps, proxy)
	if pick(2) == 0 { // native sidecar form
		proxy.RestartPolicy = "Always"
		p.Spec.InitContainers, p.Spec.Containers = []mesh.APIContainer{proxy}, apps
	}
	if pick(2) == 0 {
		p.Spec.InitContainers = append(p.Spec.InitContainers, mesh.APIContainer{Name: "migrate", SecurityContext: sc()})
	}
	image := map[string]Image{}
	for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
		image[c.Name] = Image{UID: ids[pick(len(ids))], GID: ids[pick(len(ids))]}
	}
	return p, image
}

// No generated securityContext combination exempts an app's identity.
func TestNoAppIdentityExempt(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 2102))
	for i := 0; i < 5000; i++ {
		p, img := genPod(r.IntN)
		if err := Check(meshes(), p, img); err != nil {
			t.Fatalf("%v\npod %+v", err, p.Spec)
		}
	}
}

func FuzzNoAppIdentityExempt(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Fuzz(func(t *testing.T, b []byte) {
		i := 0
		p, img := genPod(func(n int) int {
			if i >= len(b) {
				return 0
			}
			i++
			return int(b[i-1]) % n
		})
		if err := Check(meshes(), p, img); err != nil {
			t.Fatalf("%v\npod %+v", err, p.Spec)
		}
	})
}
