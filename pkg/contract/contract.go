// Package contract checks the promise mesh-cni makes for a meshed pod: no
// container but the proxy is exempt from the redirect. It judges a pod as
// the plugin does, on both paths (runtime annotations alone, and the pod
// spec), and compares the generated rules with each container's identity
// as the runtime gives it.
package contract

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/mesh-cni/mesh-cni/pkg/mesh"
	"github.com/mesh-cni/mesh-cni/pkg/rules"
)

// ImageIDsAnnotation gives fixture containers' image default identity,
// "name=uid:gid,...". Without it an image runs as root (0:0), the OCI
// default when the image sets no USER.
const ImageIDsAnnotation = "contract.mesh-cni.io/image-ids"

// Identity is what a container's processes run with.
type Identity struct {
	UID, GID  int64
	UIDPinned bool // from the spec, not the image
	GIDPinned bool
}

// Effective is a container's identity as the kubelet gives it: the
// container's securityContext, else the pod's, else the image's.
func Effective(p *mesh.APIPod, c mesh.APIContainer, image Identity) Identity {
	id := image
	for _, sc := range []*mesh.APISecurityContext{p.Spec.SecurityContext, c.SecurityContext} {
		if sc == nil {
			continue
		}
		if sc.RunAsUser != nil {
			id.UID, id.UIDPinned = *sc.RunAsUser, true
		}
		if sc.RunAsGroup != nil {
			id.GID, id.GIDPinned = *sc.RunAsGroup, true
		}
	}
	return id
}

// ImageIDs reads ImageIDsAnnotation.
func ImageIDs(p *mesh.APIPod) (map[string]Identity, error) {
	out := map[string]Identity{}
	v := p.Metadata.Annotations[ImageIDsAnnotation]
	if v == "" {
		return out, nil
	}
	for _, item := range strings.Split(v, ",") {
		name, ids, ok := strings.Cut(strings.TrimSpace(item), "=")
		u, g, ok2 := strings.Cut(ids, ":")
		uid, err1 := strconv.ParseInt(u, 10, 64)
		gid, err2 := strconv.ParseInt(g, 10, 64)
		if !ok || !ok2 || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("annotation %s=%q: want name=uid:gid", ImageIDsAnnotation, v)
		}
		out[name] = Identity{UID: uid, GID: gid}
	}
	return out, nil
}

// Exempt lists the UIDs and GIDs the rules match.
func Exempt(rs rules.RuleSet) (uids, gids map[uint32]bool) {
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

// Check judges p on both of the plugin's paths and returns every container
// other than the proxy whose identity the rules exempt. A pod the plugin
// refuses (an app with the proxy's UID) passes. Without the spec the UID
// is the mesh's contract (apps must not run as the proxy's UID), so only
// GIDs are checked there.
func Check(meshes map[string]mesh.Config, p *mesh.APIPod, image map[string]Identity) error {
	full := p.Pod()
	bare := full
	bare.SpecKnown, bare.Containers, bare.InitContainers, bare.Labels = false, nil, nil, nil
	var errs []error
	for _, pod := range []mesh.Pod{bare, full} {
		d, err := mesh.Decide(meshes, pod, nil)
		var ie *mesh.IdentityError
		if errors.As(err, &ie) {
			continue
		}
		if err != nil {
			return err
		}
		if !d.Meshed {
			continue
		}
		uids, gids := Exempt(rules.Generate(*d.Spec))
		proxy := meshes[d.Mesh].WithDefaults(d.Mesh).Sidecar
		rootProxy := false
		for _, c := range append(append([]mesh.APIContainer{}, p.Spec.InitContainers...), p.Spec.Containers...) {
			if c.Name == proxy {
				id := Effective(p, c, image[c.Name])
				rootProxy = id.UIDPinned && id.UID == 0
			}
		}
		for _, c := range append(append([]mesh.APIContainer{}, p.Spec.InitContainers...), p.Spec.Containers...) {
			if c.Name == proxy || mesh.MeshOwned(c.Name) {
				continue
			}
			id := Effective(p, c, image[c.Name])
			// A plain init container pinned to the proxy's UID is the
			// meshes' documented opt-out (it runs before the proxy).
			if pod.SpecKnown && id.UIDPinned && uids[uint32(id.UID)] && !initOptOut(p, c.Name) {
				errs = append(errs, fmt.Errorf("spec known: container %s uid %d is exempt", c.Name, id.UID))
			}
			// The one assumption (pkg/mesh/README.md): a root proxy has
			// only its group to exempt, and an app group the spec does not
			// pin is taken to differ from it.
			if gids[uint32(id.GID)] && !(pod.SpecKnown && rootProxy && !id.GIDPinned) {
				errs = append(errs, fmt.Errorf("spec known %v: container %s gid %d is exempt", pod.SpecKnown, c.Name, id.GID))
			}
		}
	}
	return errors.Join(errs...)
}

func initOptOut(p *mesh.APIPod, name string) bool {
	for _, c := range p.Spec.InitContainers {
		if c.Name == name {
			return c.RestartPolicy != "Always"
		}
	}
	return false
}
