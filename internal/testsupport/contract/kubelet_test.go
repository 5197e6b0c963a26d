package contract

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestKubelet(t *testing.T) {
	i := func(v int64) *int64 { return &v }
	strict := corev1.SupplementalGroupsPolicyStrict
	img := Image{UID: 1000, GID: 1001, Groups: []int64{4000}}
	for _, tc := range []struct {
		name  string
		ctr   *corev1.SecurityContext
		podSC *corev1.PodSecurityContext
		img   Image
		want  Process
	}{
		{name: "no USER, nothing pinned: root", want: Process{Groups: []uint32{0}}},
		{name: "the image's user, its passwd group and /etc/group memberships", img: img,
			want: Process{UID: 1000, GID: 1001, Groups: []uint32{1001, 4000}}},
		{name: "runAsUser of the image's user keeps its group and groups", img: img,
			ctr:  &corev1.SecurityContext{RunAsUser: i(1000)},
			want: Process{UID: 1000, GID: 1001, Groups: []uint32{1001, 4000}, UIDPinned: true}},
		{name: "another runAsUser: no passwd entry, group 0, no image groups", img: img,
			ctr:  &corev1.SecurityContext{RunAsUser: i(2000)},
			want: Process{UID: 2000, GID: 0, Groups: []uint32{0}, UIDPinned: true}},
		{name: "container over pod, fsGroup and supplementalGroups added", img: img,
			podSC: &corev1.PodSecurityContext{RunAsUser: i(1000), RunAsGroup: i(3000), FSGroup: i(2000), SupplementalGroups: []int64{5000, 2000}},
			ctr:   &corev1.SecurityContext{RunAsGroup: i(3001)},
			want:  Process{UID: 1000, GID: 3001, Groups: []uint32{2000, 3001, 4000, 5000}, UIDPinned: true, GIDPinned: true}},
		{name: "Strict leaves the image's groups out", img: img,
			podSC: &corev1.PodSecurityContext{SupplementalGroups: []int64{5000}, SupplementalGroupsPolicy: &strict},
			want:  Process{UID: 1000, GID: 1001, Groups: []uint32{1001, 5000}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{SecurityContext: tc.podSC,
				Containers: []corev1.Container{{Name: "app", SecurityContext: tc.ctr}}}}
			got, err := Kubelet(pod, "app", tc.img)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	if _, err := Kubelet(&corev1.Pod{}, "app", Image{}); err == nil {
		t.Error("no error for a missing container")
	}
}

func TestImageIDs(t *testing.T) {
	got, err := ImageIDs(map[string]string{ImageIDsAnnotation: "app=1000:1000+2102+4000, setup=1001:1002"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Image{"app": {UID: 1000, GID: 1000, Groups: []int64{2102, 4000}}, "setup": {UID: 1001, GID: 1002, Groups: []int64{}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	for _, bad := range []string{"app", "app=1000", "app=x:1", "app=1:2+", "=1:2", "app=-1:2"} {
		if _, err := ImageIDs(map[string]string{ImageIDsAnnotation: bad}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
