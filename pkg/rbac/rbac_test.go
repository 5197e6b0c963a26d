package rbac

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/mesh-cni/mesh-cni/pkg/chart"
	"github.com/mesh-cni/mesh-cni/pkg/mesh"
	"github.com/mesh-cni/mesh-cni/pkg/podcache"
	"github.com/mesh-cni/mesh-cni/pkg/repair"
	"github.com/mesh-cni/mesh-cni/pkg/taint"
	"github.com/mesh-cni/mesh-cni/pkg/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const chartDir = "../../charts/mesh-cni"

// install renders the chart with vals as release in ns and creates its RBAC
// objects and its DaemonSet (no controller runs it; the agent only reads
// it). It returns the agent's ServiceAccount name and the DaemonSet name.
func install(t *testing.T, env *testenv.Env, release, ns string, vals map[string]any) (sa, ds string) {
	t.Helper()
	ctx := context.Background()
	r, err := chart.Render(chartDir, chart.Options{Release: release, Namespace: ns, Values: vals})
	if err != nil {
		t.Fatalf("render chart: %v", err)
	}
	for _, doc := range strings.Split(r.Manifest, "\n---\n") {
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("rendered YAML: %v\n%s", err, doc)
		}
		var obj runtime.Object
		switch meta.Kind {
		case "ServiceAccount":
			obj = &corev1.ServiceAccount{}
		case "ClusterRole":
			obj = &rbacv1.ClusterRole{}
		case "ClusterRoleBinding":
			obj = &rbacv1.ClusterRoleBinding{}
		case "Role":
			obj = &rbacv1.Role{}
		case "RoleBinding":
			obj = &rbacv1.RoleBinding{}
		case "DaemonSet":
			obj = &appsv1.DaemonSet{}
		default:
			continue
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("decode %s: %v", meta.Kind, err)
		}
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			sa = o.Name
			_, err = env.Client.CoreV1().ServiceAccounts(ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = env.Client.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = env.Client.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = env.Client.RbacV1().Roles(ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = env.Client.RbacV1().RoleBindings(ns).Create(ctx, o, metav1.CreateOptions{})
		case *appsv1.DaemonSet:
			ds = o.Name
			_, err = env.Client.AppsV1().DaemonSets(ns).Create(ctx, o, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatalf("create %s: %v", meta.Kind, err)
		}
	}
	if sa == "" || ds == "" {
		t.Fatalf("chart rendered no ServiceAccount or DaemonSet (sa %q, ds %q)", sa, ds)
	}
	return sa, ds
}

// agentClient authenticates as the chart's ServiceAccount, once its
// bindings have reached the authorizer.
func agentClient(t *testing.T, env *testenv.Env, ns, sa string) kubernetes.Interface {
	t.Helper()
	_, c := env.ServiceAccountClient(t, ns, sa)
	eventually(t, "RBAC bindings active", func() bool {
		_, err := c.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{Limit: 1})
		return err == nil
	})
	return c
}

func brokenPod(t *testing.T, env *testenv.Env, ns, name, node string) {
	t.Helper()
	ctx := context.Background()
	p, err := env.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"linkerd.io/inject": "enabled"}},
		Spec: corev1.PodSpec{
			NodeName:       node,
			InitContainers: []corev1.Container{{Name: "mesh-cni-validator", Image: "mesh-cni:1"}},
			Containers:     []corev1.Container{{Name: "app", Image: "app:1"}, {Name: "linkerd-proxy", Image: "proxy:1"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.InitContainerStatuses = []corev1.ContainerStatus{{
		Name: "mesh-cni-validator", Image: "mesh-cni:1",
		State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 97}},
	}}
	if _, err := env.Client.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Everything the agent does through the API works with the chart's RBAC,
// for each repair policy; what the policy does not need is refused.
func TestChartRBACCoversTheAgent(t *testing.T) {
	env := testenv.Start(t)
	for _, policy := range []repair.Policy{repair.Evict, repair.Delete, repair.Label} {
		t.Run(string(policy), func(t *testing.T) {
			ctx := context.Background()
			ns := env.Namespace(t, "mesh-cni")
			node := "rbac-" + string(policy)
			env.Node(t, node, corev1.Taint{Key: "mesh-cni.io/not-ready", Effect: corev1.TaintEffectNoSchedule})
			sa, ds := install(t, env, "mesh-cni-"+string(policy), ns, map[string]any{
				"repair": map[string]any{"enabled": true, "policy": string(policy)},
			})
			c := agentClient(t, env, ns, sa)
			apps := env.Namespace(t, "apps")
			brokenPod(t, env, apps, "web", node)

			agentPodCache(t, c, node, apps)
			agentNode(t, c, node)
			agentDaemonSet(t, c, ns, ds)

			var outcomes []repair.Outcome
			outc := make(chan repair.Outcome, 10)
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				done <- repair.Run(rctx, c.CoreV1(), repair.Options{
					NodeName: node, Policy: policy,
					OnAttempt: func(_ repair.Policy, o repair.Outcome) { outc <- o },
				})
			}()
			select {
			case o := <-outc:
				outcomes = append(outcomes, o)
			case <-time.After(45 * time.Second):
				t.Fatal("no repair attempt")
			}
			if outcomes[0] != repair.Repaired {
				t.Fatalf("repair as the chart's ServiceAccount: %s", outcomes[0])
			}
			eventually(t, "repair Event written", func() bool {
				l, err := env.Client.CoreV1().Events(apps).List(ctx, metav1.ListOptions{})
				if err != nil {
					return false
				}
				for _, e := range l.Items {
					if e.InvolvedObject.Name == "web" && e.Source.Component == repair.EventComponent {
						return true
					}
				}
				return false
			})

			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}

			// Least privilege: the verbs of the other policies are refused.
			zero := int64(0)
			if policy != repair.Delete {
				brokenPod(t, env, apps, "other", node)
				err := c.CoreV1().Pods(apps).Delete(ctx, "other", metav1.DeleteOptions{GracePeriodSeconds: &zero})
				forbidden(t, "delete pods", err)
			}
			if policy != repair.Evict {
				err := c.CoreV1().Pods(apps).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: apps}})
				forbidden(t, "evict pods", err)
			}
			if policy != repair.Label {
				_, err := c.CoreV1().Pods(apps).Patch(ctx, "web", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
				forbidden(t, "patch pods", err)
			}
		})
	}
}

// With repair off the chart grants no write on pods and no Events.
func TestChartRBACRepairOff(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	ns := env.Namespace(t, "mesh-cni")
	sa, _ := install(t, env, "mesh-cni-norepair", ns, map[string]any{"repair": map[string]any{"enabled": false}})
	c := agentClient(t, env, ns, sa)
	apps := env.Namespace(t, "apps")
	env.Node(t, "rbac-off")
	brokenPod(t, env, apps, "web", "rbac-off")
	forbidden(t, "evict", c.CoreV1().Pods(apps).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: apps}}))
	forbidden(t, "delete", c.CoreV1().Pods(apps).Delete(ctx, "web", metav1.DeleteOptions{}))
	_, err := c.CoreV1().Events(apps).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: "x-"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: apps, Name: "web"},
		Reason:         "Test", Message: "m", Type: corev1.EventTypeNormal,
	}, metav1.CreateOptions{})
	forbidden(t, "create events", err)
	_, err = c.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	forbidden(t, "list secrets", err)
}

// agentPodCache: the pod cache loads and answers as the agent.
func agentPodCache(t *testing.T, c kubernetes.Interface, node, ns string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- podcache.Serve(ctx, podcache.New(c.CoreV1(), node), sock) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("podcache.Serve: %v", err)
		}
	}()
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			for {
				conn, err := (&net.Dialer{}).DialContext(ctx, "unix", sock)
				if err == nil || ctx.Err() != nil {
					return conn, err
				}
				time.Sleep(10 * time.Millisecond)
			}
		},
	}}
	resp, err := hc.Get("http://agent/v1/pods/" + ns + "/web")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var p mesh.Pod
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &p) != nil || p.Name != "web" || !p.SpecKnown {
		t.Fatalf("pod cache as the agent: %d %s", resp.StatusCode, b)
	}
}

// agentNode: startup taint removal and the status annotation.
func agentNode(t *testing.T, c kubernetes.Interface, node string) {
	t.Helper()
	ctx := context.Background()
	if err := taint.Remove(ctx, c.CoreV1(), node, "mesh-cni.io/not-ready"); err != nil {
		t.Fatalf("taint removal as the agent: %v", err)
	}
	patch := []byte(`{"metadata":{"annotations":{"mesh-cni.io/agent-status":"{\"ready\":true}"}}}`)
	if _, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("status annotation as the agent: %v", err)
	}
	n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if taint.Has(n, "mesh-cni.io/not-ready") || n.Annotations["mesh-cni.io/agent-status"] == "" {
		t.Fatalf("node after the agent's writes: taints %v annotations %v", n.Spec.Taints, n.Annotations)
	}
	_, err = c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	forbidden(t, "update nodes", err)
}

// agentDaemonSet: its own DaemonSet only (uninstall detection).
func agentDaemonSet(t *testing.T, c kubernetes.Interface, ns, ds string) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.AppsV1().DaemonSets(ns).Get(ctx, ds, metav1.GetOptions{}); err != nil {
		t.Fatalf("get own DaemonSet as the agent: %v", err)
	}
	_, err := c.AppsV1().DaemonSets(ns).Get(ctx, "someone-else", metav1.GetOptions{})
	forbidden(t, "get another DaemonSet", err)
	_, err = c.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{})
	forbidden(t, "list DaemonSets", err)
}

func forbidden(t *testing.T, what string, err error) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Errorf("%s: want Forbidden, got %v", what, err)
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testenv.Timeout())
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
