// Package contract checks the promise mesh-cni makes for a meshed pod: no
// container but the proxy is exempt from the redirect. It judges a pod as
// the plugin does, on both paths (runtime annotations alone, and the pod
// spec), and compares the generated rules with each container's identity
// as the runtime gives it.
package contract

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/mesh-cni/mesh-cni/internal/mesh"
	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// ImageIDsAnnotation describes fixture containers' images,
// "name=uid:gid[+group...],...": the UID the image's USER names, that
// user's primary group in the image's /etc/passwd and the groups its
// /etc/group lists the user in (Image). A container without an entry runs
// an image without USER (root).
const ImageIDsAnnotation = "contract.mesh-cni.io/image-ids"

// ImageIDs reads ImageIDsAnnotation.
func ImageIDs(annotations map[string]string) (map[string]Image, error) {
	out := map[string]Image{}
	v := annotations[ImageIDsAnnotation]
	if v == "" {
		return out, nil
	}
	bad := fmt.Errorf("annotation %s=%q: want name=uid:gid[+group...],...", ImageIDsAnnotation, v) //nolint:staticcheck // the "..." is the syntax
	for _, item := range strings.Split(v, ",") {
		name, ids, ok := strings.Cut(strings.TrimSpace(item), "=")
		u, rest, ok2 := strings.Cut(ids, ":")
		if !ok || !ok2 || name == "" {
			return nil, bad
		}
		nums := append([]string{u}, strings.Split(rest, "+")...)
		vals := make([]int64, len(nums))
		for i, n := range nums {
			x, err := strconv.ParseInt(n, 10, 64)
			if err != nil || !validID(x) {
				return nil, bad
			}
			vals[i] = x
		}
		out[name] = Image{UID: vals[0], GID: vals[1], Groups: vals[2:]}
	}
	return out, nil
}

// CorePod is p as a core/v1 Pod (the same JSON).
func CorePod(p *mesh.APIPod) (*corev1.Pod, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	var kp corev1.Pod
	if err := json.Unmarshal(b, &kp); err != nil {
		return nil, fmt.Errorf("pod %s/%s as core/v1: %w", p.Metadata.Namespace, p.Metadata.Name, err)
	}
	return &kp, nil
}

// declared is the comment of the rules a pod's own annotations ask for
// (Consul's ExcludeUIDs, Kuma's excludePortsForUIDs): owners the pod
// chose to exempt, not the proxy's identity.
const declared = "mesh-cni/exempt-uid"

// Exempt lists the UIDs and GIDs the rules match as the proxy's identity.
func Exempt(rs rules.RuleSet) (uids, gids map[uint32]bool) {
	uids, gids = map[uint32]bool{}, map[uint32]bool{}
	for _, t := range rs.Tables {
		for _, c := range t.Chains {
			for _, r := range c.Rules {
				if r.Comment == declared {
					continue
				}
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
func Check(meshes map[string]mesh.Config, p *mesh.APIPod, image map[string]Image) error {
	kp, err := CorePod(p)
	if err != nil {
		return err
	}
	ids := map[string]Process{}
	for _, c := range append(append([]mesh.APIContainer{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		if ids[c.Name], err = Kubelet(kp, c.Name, image[c.Name]); err != nil {
			return err
		}
	}
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
				rootProxy = ids[c.Name].UIDPinned && ids[c.Name].UID == 0
			}
		}
		for _, c := range append(append([]mesh.APIContainer{}, p.Spec.InitContainers...), p.Spec.Containers...) {
			if c.Name == proxy || mesh.MeshOwned(c.Name) {
				continue
			}
			id := ids[c.Name]
			// A plain init container pinned to the proxy's UID is the
			// meshes' documented opt-out (it runs before the proxy).
			if pod.SpecKnown && id.UIDPinned && uids[id.UID] && !initOptOut(p, c.Name) {
				errs = append(errs, fmt.Errorf("spec known: container %s uid %d is exempt", c.Name, id.UID))
			}
			// The one assumption (internal/mesh/README.md): a root proxy has
			// only its group to exempt, and an app group the spec does not
			// pin is taken to differ from it.
			if gids[id.GID] && !(pod.SpecKnown && rootProxy && !id.GIDPinned) {
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
