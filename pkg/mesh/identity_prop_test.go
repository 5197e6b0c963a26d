package mesh

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/mesh-cni/mesh-cni/pkg/rules"
)

// ids are the values the generator draws: root, the meshes' proxy IDs,
// an app ID and an OpenShift-range ID.
var ids = []int64{0, 1000, 1337, 2102, 1000650000}

// drawn is one generated pod and the image defaults of its containers
// (unknown to the plugin, known to the runtime).
type drawn struct {
	pod      APIPod
	imageUID map[string]int64
	imageGID map[string]int64
}

// genPod builds an injected pod from choices: pick(n) returns 0..n-1.
func genPod(pick func(n int) int) drawn {
	id := func() *int64 {
		if i := pick(len(ids) + 1); i < len(ids) {
			return &ids[i]
		}
		return nil
	}
	sc := func() *APISecurityContext {
		if pick(4) == 0 {
			return nil
		}
		return &APISecurityContext{RunAsUser: id(), RunAsGroup: id()}
	}
	d := drawn{imageUID: map[string]int64{}, imageGID: map[string]int64{}}
	p := &d.pod
	p.Metadata.Namespace, p.Metadata.Name = "ns", "p"
	p.Spec.SecurityContext = sc()
	proxy := APIContainer{Name: "linkerd-proxy", SecurityContext: sc()}
	p.Metadata.Annotations = map[string]string{LinkerdProxyVersion: "edge-26.8.1"}
	if pick(2) == 0 {
		proxy.Name = "istio-proxy"
		p.Metadata.Annotations = map[string]string{IstioStatus: istioStatusSidecar}
	}
	apps := []APIContainer{{Name: "app", SecurityContext: sc()}}
	if pick(2) == 0 {
		apps = append(apps, APIContainer{Name: "helper", SecurityContext: sc()})
	}
	p.Spec.Containers = append(apps, proxy)
	if pick(2) == 0 { // native sidecar form
		proxy.RestartPolicy = "Always"
		p.Spec.InitContainers, p.Spec.Containers = []APIContainer{proxy}, apps
	}
	if pick(2) == 0 {
		p.Spec.InitContainers = append(p.Spec.InitContainers, APIContainer{Name: "migrate", SecurityContext: sc()})
	}
	for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
		d.imageUID[c.Name] = ids[pick(len(ids))]
		d.imageGID[c.Name] = ids[pick(len(ids))]
	}
	return d
}

// effective is what the runtime gives a container: its securityContext,
// else the pod's, else the image's.
func effective(d drawn, c APIContainer) (uid, gid int64) {
	uid, gid = d.imageUID[c.Name], d.imageGID[c.Name]
	for _, sc := range []*APISecurityContext{d.pod.Spec.SecurityContext, c.SecurityContext} {
		if sc != nil && sc.RunAsUser != nil {
			uid = *sc.RunAsUser
		}
		if sc != nil && sc.RunAsGroup != nil {
			gid = *sc.RunAsGroup
		}
	}
	return uid, gid
}

// exempt lists the UIDs and GIDs the generated rules match.
func exempt(rs rules.RuleSet) (uids, gids map[uint32]bool) {
	uids, gids = map[uint32]bool{}, map[uint32]bool{}
	for _, t := range rs.Tables {
		for _, c := range t.Chains {
			for _, r := range c.Rules {
				if r.UID != nil && !r.NotUID {
					uids[*r.UID] = true
				}
				if r.GID != nil && !r.NotGID {
					gids[*r.GID] = true
				}
			}
		}
	}
	return uids, gids
}

// checkNoAppExempt: no app container's identity is matched by the rules,
// or the pod is refused. An image default UID equal to the proxy's cannot
// be seen from the spec (pkg/mesh/README.md), so only the GID is checked
// for containers whose UID comes from the image.
func checkNoAppExempt(t *testing.T, d drawn) {
	pod := d.pod.Pod()
	for _, p := range []Pod{pod, func() Pod { q := pod; q.SpecKnown, q.Containers, q.InitContainers = false, nil, nil; return q }()} {
		dec, err := Decide(defaultMeshes(), p, nil)
		var ie *IdentityError
		if errors.As(err, &ie) {
			continue
		}
		if err != nil {
			t.Fatalf("%+v: %v", d.pod.Spec, err)
		}
		if !dec.Meshed {
			continue // needs the spec: judged in the next round
		}
		uids, gids := exempt(rules.Generate(*dec.Spec))
		proxyName := "linkerd-proxy"
		if dec.Mesh == Istio {
			proxyName = "istio-proxy"
		}
		for _, c := range append(append([]APIContainer{}, d.pod.Spec.InitContainers...), d.pod.Spec.Containers...) {
			if c.Name == proxyName {
				continue
			}
			uid, gid := effective(d, c)
			pinnedUID := (c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil) ||
				(d.pod.Spec.SecurityContext != nil && d.pod.Spec.SecurityContext.RunAsUser != nil)
			// Without the spec the UID is the mesh's documented contract
			// (Istio: apps must not run as 1337), so only GIDs are checked.
			if p.SpecKnown && pinnedUID && uids[uint32(uid)] {
				t.Errorf("spec known %v: container %s uid %d is exempt\npod %+v", p.SpecKnown, c.Name, uid, d.pod.Spec)
			}
			if gids[uint32(gid)] {
				t.Errorf("spec known %v: container %s gid %d is exempt\npod %+v", p.SpecKnown, c.Name, gid, d.pod.Spec)
			}
		}
	}
}

func TestNoAppIdentityExempt(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 2102))
	for i := 0; i < 5000 && !t.Failed(); i++ {
		checkNoAppExempt(t, genPod(r.IntN))
	}
}

func FuzzNoAppIdentityExempt(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Fuzz(func(t *testing.T, b []byte) {
		i := 0
		checkNoAppExempt(t, genPod(func(n int) int {
			if i >= len(b) {
				return 0
			}
			i++
			return int(b[i-1]) % n
		}))
	})
}
