package mesh

import (
	"fmt"

	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// meshOwned are init containers a mesh injects that run as the proxy on
// purpose (they check the redirect from the proxy's side): they share its
// identity without being an app.
var meshOwned = map[string]bool{"istio-validation": true, "linkerd-network-validator": true, "kuma-validation": true}

// MeshOwned: the mesh injected container name to run as the proxy.
func MeshOwned(name string) bool { return meshOwned[name] }

// IdentityError: an app container runs as the proxy's UID, so its
// traffic would bypass the proxy. ADD fails for that pod.
// With Group set, the container pins the group of a root proxy, whose only
// exempt identity that group is.
type IdentityError struct {
	Container string
	UID       uint32
	Group     *uint32
}

func (e *IdentityError) Error() string {
	if e.Group != nil {
		return fmt.Sprintf("container %s runs with group %d, the group of the proxy, which runs as root and has no other exempt identity: pin another runAsGroup on %s", e.Container, *e.Group, e.Container)
	}
	return fmt.Sprintf("container %s runs as uid %d, the proxy's exempt uid: its traffic would bypass the proxy", e.Container, e.UID)
}

// meshedAs is the verdict on a meshed pod: spec s with the proxy's
// identity (proxyIdentity), the note saying why a GID is not exempt.
func meshedAs(s rules.Spec, pod Pod, proxy *Container) (judgement, error) {
	note, err := proxyIdentity(&s, pod, proxy)
	if err != nil {
		return judgement{}, err
	}
	return judgement{v: meshed, spec: s, note: note}, nil
}

// proxyIdentity sets the exempt identity from what the proxy runs as: its
// runAsUser/runAsGroup (container over pod, already merged), else the
// configured default. Zero is ignored (a root proxy would exempt every root
// process), as Istio does. The GID is exempt only when every other
// container's primary GID is pinned and differs from it; without the spec
// no GID is exempt. It returns why a GID is not exempt, for logs and explain.
func proxyIdentity(s *rules.Spec, pod Pod, proxy *Container) (string, error) {
	if !pod.SpecKnown || proxy == nil {
		if s.ProxyGID != nil {
			note := fmt.Sprintf("gid %d not exempt: the pod spec is unknown", *s.ProxyGID)
			s.ProxyGID = nil
			return note, nil
		}
		return "", nil
	}
	if id, ok := validID(proxy.RunAsUser); ok {
		s.ProxyUID = id
	}
	if id, ok := validID(proxy.RunAsGroup); ok {
		s.ProxyGID = &id
	}
	// A root proxy (Istio's TPROXY mode) has no UID to exempt: its group is
	// the only identity that keeps its traffic from looping, so an app
	// group that is not pinned is assumed to differ rather than breaking
	// the pod; a pinned equal one still drops it.
	root := proxy.RunAsUser != nil && *proxy.RunAsUser == 0
	note := ""
	for _, list := range [][]Container{pod.InitContainers, pod.Containers} {
		for i := range list {
			c := &list[i]
			if c == proxy || c.Name == proxy.Name || meshOwned[c.Name] {
				continue
			}
			if c.RunAsUser != nil && *c.RunAsUser == int64(s.ProxyUID) {
				if !isInit(pod, c) {
					return "", &IdentityError{Container: c.Name, UID: s.ProxyUID}
				}
				// An init container runs before the proxy does; running
				// it as the proxy's UID is the meshes' documented way to
				// let it reach the network (docs/topics.md).
				if note == "" {
					note = fmt.Sprintf("init container %s runs as the proxy's uid %d: its traffic bypasses the proxy", c.Name, s.ProxyUID)
				}
			}
			if s.ProxyGID == nil || note != "" {
				continue
			}
			switch {
			case c.RunAsGroup == nil && !root:
				note = fmt.Sprintf("gid %d not exempt: container %s's group is not pinned (image default)", *s.ProxyGID, c.Name)
			case c.RunAsGroup != nil && *c.RunAsGroup == int64(*s.ProxyGID) && root:
				return "", &IdentityError{Container: c.Name, Group: s.ProxyGID}
			case c.RunAsGroup != nil && *c.RunAsGroup == int64(*s.ProxyGID):
				note = fmt.Sprintf("gid %d not exempt: shared with container %s", *s.ProxyGID, c.Name)
			}
		}
	}
	if note != "" {
		s.ProxyGID = nil
	}
	return note, nil
}

func validID(p *int64) (uint32, bool) {
	if p == nil || *p <= 0 || *p > MaxID {
		return 0, false
	}
	return uint32(*p), true
}

// isInit: c is a plain init container (not a native sidecar).
func isInit(pod Pod, c *Container) bool {
	for i := range pod.InitContainers {
		if &pod.InitContainers[i] == c {
			return c.RestartPolicy != "Always"
		}
	}
	return false
}
