package contract

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// Image is what a container image adds to its processes' identity, as the
// runtime reads it: the UID its USER names, that user's primary group in
// the image's /etc/passwd and the groups whose /etc/group entry lists the
// user. The image knows no other user but root (0:0, no further groups).
// The zero Image is an image without USER: root.
type Image struct {
	UID, GID int64
	Groups   []int64
}

// Process is the identity a container's processes run with.
type Process struct {
	UID, GID uint32
	// Groups are the supplementary groups, the primary GID among them,
	// in ascending order without repeats, as containerd sets them
	// (internal/cri/opts mergeGids).
	Groups []uint32
	// UIDPinned and GIDPinned: set by the pod spec (runAsUser,
	// runAsGroup), not the image. Only pinned IDs are known to the plugin.
	UIDPinned, GIDPinned bool
}

// Kubelet is the identity the kubelet and containerd give container name
// of pod, whose image is img (Kubernetes v1.34.4, containerd v2.1.5):
//
//   - UID: the container's runAsUser, else the pod's, else the image's
//     (kubelet pkg/kubelet/kuberuntime/security_context.go
//     determineEffectiveSecurityContext; the image's USER reaches the
//     kubelet as its user part only, helpers.go getImageUser).
//   - GID: the container's runAsGroup, else the pod's, else the primary
//     group of that UID in the image's /etc/passwd, else 0. A group in the
//     image's USER ("1000:3000") is not used: the kubelet passes the UID
//     alone (containerd internal/cri/util GenerateUserString, pkg/oci
//     WithUser/WithUserID).
//   - Supplementary groups: the primary GID (pkg/oci ensureAdditionalGids),
//     with supplementalGroupsPolicy Merge (the default) the image's
//     /etc/group memberships of that UID's user (WithAdditionalGIDs), then
//     the pod's fsGroup and supplementalGroups (the kubelet's
//     SupplementalGroups, containerd WithSupplementalGroups); Strict leaves
//     out the image's.
//
// With hostUsers: false these are the IDs inside the pod's user namespace.
func Kubelet(pod *corev1.Pod, name string, img Image) (Process, error) {
	c := container(pod, name)
	if c == nil {
		return Process{}, fmt.Errorf("pod %s/%s has no container %s", pod.Namespace, pod.Name, name)
	}
	var uid, gid *int64
	policy := corev1.SupplementalGroupsPolicyMerge
	var extra []int64
	if sc := pod.Spec.SecurityContext; sc != nil {
		uid, gid = sc.RunAsUser, sc.RunAsGroup
		if sc.FSGroup != nil {
			extra = append(extra, *sc.FSGroup)
		}
		extra = append(extra, sc.SupplementalGroups...)
		if sc.SupplementalGroupsPolicy != nil {
			policy = *sc.SupplementalGroupsPolicy
		}
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			uid = sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			gid = sc.RunAsGroup
		}
	}
	p := Process{UIDPinned: uid != nil, GIDPinned: gid != nil}
	u := img.UID
	if uid != nil {
		u = *uid
	}
	ownUser := u == img.UID // the image's /etc/passwd knows this UID
	g := int64(0)
	switch {
	case gid != nil:
		g = *gid
	case ownUser:
		g = img.GID
	}
	if !validID(u) || !validID(g) {
		return Process{}, fmt.Errorf("container %s: uid %d gid %d out of range", name, u, g)
	}
	p.UID, p.GID = uint32(u), uint32(g)
	groups := []int64{g}
	if policy == corev1.SupplementalGroupsPolicyMerge && ownUser {
		groups = append(groups, img.Groups...)
	}
	for _, x := range append(groups, extra...) {
		if !validID(x) {
			return Process{}, fmt.Errorf("container %s: group %d out of range", name, x)
		}
		p.Groups = append(p.Groups, uint32(x))
	}
	slices.Sort(p.Groups)
	p.Groups = slices.Compact(p.Groups)
	return p, nil
}

func validID(v int64) bool { return v >= 0 && v < 1<<32-1 }

func container(pod *corev1.Pod, name string) *corev1.Container {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}
