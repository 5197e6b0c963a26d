package nodepods

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// One informer against a real API server: only this node's pods, slimmed
// to what the pod cache and the repair controller read, and two handlers
// (as the agent adds them) both see every pod.
func TestNodeScopedAndSlim(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	ns := env.Namespace(t, "nodepods")
	env.Node(t, "np-mine")
	env.Node(t, "np-other")
	user := int64(1337)
	always := corev1.ContainerRestartPolicyAlways
	mk := func(name, node string) {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name},
				Annotations: map[string]string{"linkerd.io/inject": "enabled"}},
			Spec: corev1.PodSpec{
				NodeName:       node,
				InitContainers: []corev1.Container{{Name: "proxy", Image: "proxy:1", RestartPolicy: &always, Args: []string{"--x"}}},
				Containers: []corev1.Container{{Name: "app", Image: "app:1", Env: []corev1.EnvVar{{Name: "A", Value: "1"}},
					SecurityContext: &corev1.SecurityContext{RunAsUser: &user}}},
				Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			},
		}
		created, err := env.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1",
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "proxy", Image: "proxy:1", ImageID: "x",
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 97}}}},
			Conditions: []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionFalse}}}
		if _, err := env.Client.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mk("mine", "np-mine")
	mk("theirs", "np-other")

	inf := New(env.Client.CoreV1(), "np-mine")
	seen := [2]chan string{make(chan string, 10), make(chan string, 10)}
	for i := range seen {
		ch := seen[i]
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(o any) { ch <- o.(*corev1.Pod).Name }}); err != nil {
			t.Fatal(err)
		}
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go inf.Run(rctx.Done())
	if !cache.WaitForCacheSync(rctx.Done(), inf.HasSynced) {
		t.Fatal("no sync")
	}
	for i, ch := range seen {
		select {
		case name := <-ch:
			if name != "mine" {
				t.Errorf("handler %d saw %s", i, name)
			}
		case <-time.After(testenv.Timeout()):
			t.Fatalf("handler %d saw nothing within %v", i, testenv.Timeout())
		}
	}
	if keys := inf.GetStore().ListKeys(); len(keys) != 1 || keys[0] != ns+"/mine" {
		t.Fatalf("cached %v, want only this node's pod", keys)
	}
	obj, _, _ := inf.GetStore().GetByKey(ns + "/mine")
	p := obj.(*corev1.Pod)
	// Kept: what the pod cache and repair read.
	if p.UID == "" || p.Labels["app"] != "mine" || p.Annotations["linkerd.io/inject"] != "enabled" || p.Spec.NodeName != "np-mine" ||
		p.Status.Phase != corev1.PodRunning || len(p.Status.InitContainerStatuses) != 1 ||
		p.Spec.InitContainers[0].RestartPolicy == nil || p.Spec.InitContainers[0].Args[0] != "--x" ||
		p.Spec.Containers[0].Env[0].Value != "1" || *p.Spec.Containers[0].SecurityContext.RunAsUser != user {
		t.Errorf("slim dropped a field that is read: %+v", p)
	}
	if len(p.Status.Conditions) != 1 || p.Status.Conditions[0].Type != corev1.DisruptionTarget {
		t.Errorf("conditions %+v, want only DisruptionTarget", p.Status.Conditions)
	}
	// Dropped: the rest.
	if p.ManagedFields != nil || p.Spec.Volumes != nil || p.Spec.Containers[0].Image != "" || p.Status.PodIP != "" {
		t.Errorf("slim kept fields nobody reads: %+v", p)
	}
}
