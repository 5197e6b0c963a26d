package podcache

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mesh-cni/mesh-cni/internal/mesh"
)

func ptr[T any](v T) *T { return &v }

func testPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   "app",
			Name:        "web-0",
			Labels:      map[string]string{"app": "web"},
			Annotations: map[string]string{"linkerd.io/inject": "enabled"},
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "kubectl"},
			},
		},
		Spec: corev1.PodSpec{
			NodeName:        "node-a",
			SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr(int64(1000)), RunAsGroup: ptr(int64(3000))},
			InitContainers: []corev1.Container{{
				Name:          "linkerd-proxy",
				RestartPolicy: ptr(corev1.ContainerRestartPolicyAlways),
				SecurityContext: &corev1.SecurityContext{
					RunAsUser: ptr(int64(2102)),
				},
				Env: []corev1.EnvVar{
					{Name: "LINKERD2_PROXY_INBOUND_LISTEN_ADDR", Value: "0.0.0.0:4143"},
					{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
				},
				Args: []string{"--log", "info"},
			}},
			Containers: []corev1.Container{
				{Name: "app", Image: "app:1", Command: []string{"/app"}},
				{Name: "batch", SecurityContext: &corev1.SecurityContext{RunAsGroup: ptr(int64(5))}},
			},
			Volumes: []corev1.Volume{{Name: "data"}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func TestFromPod(t *testing.T) {
	got := FromPod(testPod())
	want := &mesh.Pod{
		Namespace:   "app",
		Name:        "web-0",
		Labels:      map[string]string{"app": "web"},
		Annotations: map[string]string{"linkerd.io/inject": "enabled"},
		SpecKnown:   true,
		InitContainers: []mesh.Container{{
			Name:          "linkerd-proxy",
			RunAsUser:     ptr(int64(2102)), // container wins over pod
			RunAsGroup:    ptr(int64(3000)), // inherited from the pod
			Env:           map[string]string{"LINKERD2_PROXY_INBOUND_LISTEN_ADDR": "0.0.0.0:4143"},
			Args:          []string{"--log", "info"},
			RestartPolicy: "Always",
		}},
		Containers: []mesh.Container{
			{Name: "app", RunAsUser: ptr(int64(1000)), RunAsGroup: ptr(int64(3000))},
			{Name: "batch", RunAsUser: ptr(int64(1000)), RunAsGroup: ptr(int64(5))},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("FromPod:\n got %+v\nwant %+v", got, want)
	}
}

func TestFromPodNoSecurityContext(t *testing.T) {
	p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}}
	got := FromPod(p)
	if len(got.Containers) != 1 || got.Containers[0].RunAsUser != nil || got.Containers[0].RunAsGroup != nil {
		t.Fatalf("unset user/group must stay nil (image default): %+v", got.Containers)
	}
	if !got.SpecKnown || got.InitContainers != nil {
		t.Fatalf("unexpected %+v", got)
	}
}

// The slimmed cache object must convert exactly like the full pod.
func TestSlimKeepsWhatFromPodReads(t *testing.T) {
	full := testPod()
	s, err := slim(full)
	if err != nil {
		t.Fatal(err)
	}
	sp := s.(*corev1.Pod)
	if !reflect.DeepEqual(FromPod(sp), FromPod(full)) {
		t.Fatalf("slim changed the conversion:\n%+v\n%+v", FromPod(sp), FromPod(full))
	}
	if sp.ManagedFields != nil || sp.Spec.Volumes != nil || sp.Spec.Containers[0].Image != "" {
		t.Fatalf("slim kept fields it should drop: %+v", sp)
	}
	if sp.Spec.NodeName != "node-a" {
		t.Fatalf("slim dropped nodeName")
	}
}
