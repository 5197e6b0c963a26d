package mesh

import (
	"errors"
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// Linkerd's injector sets runAsUser 2102 and no runAsGroup on its proxy, so
// a pod-level runAsGroup applies to the app as well: that GID must not be
// exempt, or the app's connections leave unredirected.
func TestPodLevelGroupNotExempt(t *testing.T) {
	sc := &APISecurityContext{RunAsGroup: ptr(int64(1000))}
	var ap APIPod
	ap.Metadata.Namespace, ap.Metadata.Name = "ns", "p"
	ap.Metadata.Annotations = map[string]string{LinkerdProxyVersion: "edge-26.8.1"}
	ap.Spec.SecurityContext = sc
	ap.Spec.Containers = []APIContainer{{Name: "app"}, {Name: "linkerd-proxy", SecurityContext: &APISecurityContext{RunAsUser: ptr(int64(2102))}}}
	d, err := Decide(defaultMeshes(), ap.Pod(), nil)
	if err != nil || !d.Meshed {
		t.Fatalf("%+v %v", d, err)
	}
	if d.Spec.ProxyUID != 2102 || d.Spec.ProxyGID != nil {
		t.Errorf("proxy uid/gid %d/%v: the pod-level gid 1000 is the app's too", d.Spec.ProxyUID, d.Spec.ProxyGID)
	}
	if len(d.Notes) != 1 || d.Notes[0] != "gid 1000 not exempt: shared with container app" {
		t.Errorf("notes: %q", d.Notes)
	}
}

func TestProxyGID(t *testing.T) {
	proxy := Container{Name: "linkerd-proxy", RunAsUser: ptr(int64(2102)), RunAsGroup: ptr(int64(2102))}
	cases := []struct {
		name string
		pod  Pod
		gid  *uint32
		note string
	}{
		{"app group pinned and different", linkerdPodWith(proxy, Container{Name: "app", RunAsGroup: ptr(int64(1000))}), ptr(uint32(2102)), ""},
		{"app group unpinned", linkerdPodWith(proxy, Container{Name: "app"}), nil, "gid 2102 not exempt: container app's group is not pinned (image default)"},
		{"init container shares it", linkerdPodWith(proxy, Container{Name: "app", RunAsGroup: ptr(int64(1))}, Container{Name: "init", RunAsGroup: ptr(int64(2102))}),
			nil, "gid 2102 not exempt: shared with container init"},
	}
	for _, c := range cases {
		d, err := Decide(defaultMeshes(), c.pod, nil)
		if err != nil || !d.Meshed {
			t.Fatalf("%s: %+v %v", c.name, d, err)
		}
		got := d.Spec.ProxyGID
		if (got == nil) != (c.gid == nil) || (got != nil && *got != *c.gid) {
			t.Errorf("%s: gid %v, want %v", c.name, got, c.gid)
		}
		if note := strings.Join(d.Notes, ";"); note != c.note {
			t.Errorf("%s: note %q, want %q", c.name, note, c.note)
		}
	}
}

func linkerdPodWith(proxy Container, others ...Container) Pod {
	p := Pod{Namespace: "ns", Name: "p", SpecKnown: true, Annotations: map[string]string{LinkerdProxyVersion: "edge-26.8.1"}}
	p.Containers = append([]Container{proxy}, others[0])
	p.InitContainers = others[1:]
	return p
}

// An app container with the proxy's UID would bypass the proxy: ADD fails
// and names it.
func TestAppWithProxyUID(t *testing.T) {
	p := linkerdPodWith(Container{Name: "linkerd-proxy", RunAsUser: ptr(int64(2102))}, Container{Name: "app", RunAsUser: ptr(int64(2102))})
	d, err := Decide(defaultMeshes(), p, nil)
	var ie *IdentityError
	if !errors.As(err, &ie) || ie.Container != "app" || ie.UID != 2102 || d.Reason != ReasonProxyIdentity {
		t.Fatalf("want an identity error naming app: %+v %v", d, err)
	}
}

// Istio with annotations alone: the proxy may not run as 1337 (OpenShift),
// so no GID is assumed exempt; with the spec, its runAsUser decides.
func TestIstioIdentityFromSpec(t *testing.T) {
	if d, err := Decide(defaultMeshes(), istioPod(nil), nil); err != nil || !d.NeedSpec {
		t.Fatalf("by default istio's identity comes from the spec: %+v %v", d, err)
	}
	d, err := Decide(trustedIstio(), istioPod(nil), nil)
	if err != nil || !d.Meshed || d.Spec.ProxyGID != nil {
		t.Fatalf("annotations alone must not exempt a gid: %+v %v", d, err)
	}
	p := istioPod(nil)
	p.SpecKnown = true
	uid := int64(1000650000) // an OpenShift namespace range UID
	p.Containers = []Container{{Name: "app", RunAsUser: &uid, RunAsGroup: ptr(int64(0))},
		{Name: "istio-proxy", Args: []string{"proxy", "sidecar"}, RunAsUser: ptr(uid + 1), RunAsGroup: ptr(uid + 1)}}
	p.InitContainers = []Container{{Name: "istio-validation", RunAsUser: ptr(uid + 1), RunAsGroup: ptr(uid + 1)}}
	s := spec(t, defaultMeshes(), p, rules.IPv4)
	if s.ProxyUID != uint32(uid+1) || s.ProxyGID == nil || *s.ProxyGID != uint32(uid+1) {
		t.Errorf("istio proxy identity: %d/%v", s.ProxyUID, s.ProxyGID)
	}
}

// A root proxy (Istio TPROXY) keeps its group exempt when app groups are
// not pinned, and refuses a pod whose app pins the same group.
func TestRootProxyGroup(t *testing.T) {
	p := istioPod(nil)
	p.SpecKnown = true
	p.Containers = []Container{{Name: "app"},
		{Name: "istio-proxy", Args: []string{"proxy", "sidecar"}, RunAsUser: ptr(int64(0)), RunAsGroup: ptr(int64(1337))}}
	s := spec(t, defaultMeshes(), p, rules.IPv4)
	if s.ProxyGID == nil || *s.ProxyGID != 1337 {
		t.Fatalf("root proxy's group must stay exempt: %v", s.ProxyGID)
	}
	p.Containers[0].RunAsGroup = ptr(int64(1337))
	if _, err := Decide(defaultMeshes(), p, nil); err == nil || !strings.Contains(err.Error(), "container app runs with group 1337") {
		t.Fatalf("an app pinning the root proxy's group must fail ADD, got %v", err)
	}
}

// A plain init container as the proxy's UID is the documented opt-out; a
// native sidecar as the proxy's UID is refused like an app.
func TestInitContainerWithProxyUID(t *testing.T) {
	init := Container{Name: "migrate", RunAsUser: ptr(int64(2102))}
	p := linkerdPodWith(Container{Name: "linkerd-proxy", RunAsUser: ptr(int64(2102))}, Container{Name: "app"}, init)
	d, err := Decide(defaultMeshes(), p, nil)
	if err != nil || !d.Meshed {
		t.Fatalf("init container as the proxy's uid: %+v %v", d, err)
	}
	init.RestartPolicy = "Always"
	p = linkerdPodWith(Container{Name: "linkerd-proxy", RunAsUser: ptr(int64(2102))}, Container{Name: "app"}, init)
	var ie *IdentityError
	if _, err := Decide(defaultMeshes(), p, nil); !errors.As(err, &ie) || ie.Container != "migrate" {
		t.Fatalf("native sidecar as the proxy's uid must be refused: %v", err)
	}
}
