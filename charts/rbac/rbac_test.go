package rbac

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/mesh-cni/mesh-cni/charts/chart"
	"github.com/mesh-cni/mesh-cni/internal/agent/kubeconfig"
	"github.com/mesh-cni/mesh-cni/internal/agent/podcache"
	"github.com/mesh-cni/mesh-cni/internal/agent/repair"
	"github.com/mesh-cni/mesh-cni/internal/agent/taint"
	"github.com/mesh-cni/mesh-cni/internal/mesh"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const chartDir = "../mesh-cni"

// install renders the chart with vals as release in ns and creates its RBAC
// objects and its DaemonSet (no controller runs it; the agent only reads
// it). It returns the agent's ServiceAccount name and the DaemonSet name.
func install(t *testing.T, env *testenv.Env, release, ns string, vals map[string]any) (sa, ds string) {
	t.Helper()
	sa, ds, _ = installRules(t, env, release, ns, vals)
	return sa, ds
}

// installRules is install that also returns every rule of the rendered
// (Cluster)Roles.
func installRules(t *testing.T, env *testenv.Env, release, ns string, vals map[string]any) (sa, ds string, rules []rbacv1.PolicyRule) {
	t.Helper()
	return installFor(t, env, "", release, ns, vals)
}

// installFor is installRules with the chart rendered for kubeVersion ("":
// the chart library's default).
func installFor(t *testing.T, env *testenv.Env, kubeVersion, release, ns string, vals map[string]any) (sa, ds string, rules []rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	r, err := chart.Render(chartDir, chart.Options{Release: release, Namespace: ns, Values: vals, KubeVersion: kubeVersion})
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
		case "ValidatingAdmissionPolicy":
			obj = &admv1.ValidatingAdmissionPolicy{}
		case "ValidatingAdmissionPolicyBinding":
			obj = &admv1.ValidatingAdmissionPolicyBinding{}
		default:
			continue
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("decode %s: %v", meta.Kind, err)
		}
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			if !strings.HasSuffix(o.Name, "-plugin") {
				sa = o.Name
			}
			_, err = env.Client.CoreV1().ServiceAccounts(ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			rules = append(rules, o.Rules...)
			_, err = env.Client.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = env.Client.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			rules = append(rules, o.Rules...)
			_, err = env.Client.RbacV1().Roles(ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = env.Client.RbacV1().RoleBindings(ns).Create(ctx, o, metav1.CreateOptions{})
		case *appsv1.DaemonSet:
			ds = o.Name
			_, err = env.Client.AppsV1().DaemonSets(ns).Create(ctx, o, metav1.CreateOptions{})
		case *admv1.ValidatingAdmissionPolicy:
			_, err = env.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, o, metav1.CreateOptions{})
			name := o.Name
			t.Cleanup(func() {
				_ = env.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(context.Background(), name, metav1.DeleteOptions{})
			})
		case *admv1.ValidatingAdmissionPolicyBinding:
			_, err = env.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, o, metav1.CreateOptions{})
			name := o.Name
			t.Cleanup(func() {
				_ = env.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
			})
		}
		if err != nil {
			t.Fatalf("create %s: %v", meta.Kind, err)
		}
	}
	if sa == "" || ds == "" {
		t.Fatalf("chart rendered no ServiceAccount or DaemonSet (sa %q, ds %q)", sa, ds)
	}
	return sa, ds, rules
}

// agentClient authenticates as the chart's ServiceAccount with a token bound
// to an agent pod on node (as the kubelet's projected token is), once its
// bindings have reached the authorizer.
func agentClient(t *testing.T, env *testenv.Env, ns, sa, node string) kubernetes.Interface {
	t.Helper()
	_, c := env.PodClient(t, ns, sa, "mesh-cni-agent-"+node, node)
	testenv.EventuallyTrue(t, "RBAC bindings active", func() bool {
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
				"repair":       map[string]any{"enabled": true, "policy": string(policy)},
				"startupTaint": map[string]any{"enabled": true},
			})
			c := agentClient(t, env, ns, sa, node)
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
			case <-time.After(testenv.Timeout()):
				t.Fatalf("no repair attempt within %v", testenv.Timeout())
			}
			if outcomes[0] != repair.Repaired {
				t.Fatalf("repair as the chart's ServiceAccount: %s", outcomes[0])
			}
			testenv.EventuallyTrue(t, "repair Event written", func() bool {
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
			// No policy may change a pod's spec (its image: code execution
			// wherever the pod runs).
			brokenPod(t, env, apps, "spec", node)
			_, err := c.CoreV1().Pods(apps).Patch(ctx, "spec", types.StrategicMergePatchType, []byte(`{"spec":{"containers":[{"name":"app","image":"evil:1"}]}}`), metav1.PatchOptions{})
			forbidden(t, "patch a pod's spec", err)
			_, err = c.CoreV1().Pods(apps).Patch(ctx, "spec", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
			forbidden(t, "patch pods", err)
		})
	}
}

// With repair off the chart grants no write on pods; Events stay, for the
// Warning on its Node when the agent refuses a setting.
func TestChartRBACRepairOff(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	ns := env.Namespace(t, "mesh-cni")
	sa, _ := install(t, env, "mesh-cni-norepair", ns, map[string]any{"repair": map[string]any{"enabled": false}})
	env.Node(t, "rbac-off")
	c := agentClient(t, env, ns, sa, "rbac-off")
	apps := env.Namespace(t, "apps")
	brokenPod(t, env, apps, "web", "rbac-off")
	forbidden(t, "evict", c.CoreV1().Pods(apps).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: apps}}))
	forbidden(t, "delete", c.CoreV1().Pods(apps).Delete(ctx, "web", metav1.DeleteOptions{}))
	_, err := c.CoreV1().Events(apps).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: "x-"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: apps, Name: "web"},
		Reason:         "Test", Message: "m", Type: corev1.EventTypeNormal,
		Source: corev1.EventSource{Component: agentComponent, Host: "rbac-off"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Errorf("create events with repair off: %v (the refused-setting Warning needs it)", err)
	}
	_, err = c.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	forbidden(t, "list secrets", err)
}

// The API server, not the agent's good behaviour, keeps its writes on its own
// node: with a token bound to a pod on one node (what the kubelet mounts),
// it can write that Node and the pods on it and nothing on another node.
func TestAgentWritesOnlyItsOwnNode(t *testing.T) {
	env := testenv.Start(t)
	for _, policy := range []repair.Policy{repair.Delete, repair.Label} {
		t.Run(string(policy), func(t *testing.T) {
			ctx := context.Background()
			ns := env.Namespace(t, "mesh-cni")
			own, other := "own-"+string(policy), "other-"+string(policy)
			env.Node(t, own, corev1.Taint{Key: "mesh-cni.io/not-ready", Effect: corev1.TaintEffectNoSchedule},
				corev1.Taint{Key: "other", Effect: corev1.TaintEffectNoSchedule})
			env.Node(t, other)
			sa, _ := install(t, env, "own-"+string(policy), ns, map[string]any{
				"repair":       map[string]any{"enabled": true, "policy": string(policy)},
				"startupTaint": map[string]any{"enabled": true},
			})
			c := agentClient(t, env, ns, sa, own)
			apps := env.Namespace(t, "apps")
			brokenPod(t, env, apps, "mine", own)
			brokenPod(t, env, apps, "theirs", other)

			annotate := []byte(`{"metadata":{"annotations":{"mesh-cni.io/agent-status":"{}"}}}`)
			// The policy reaches the API server's admission shortly after
			// it is created; until then the write to the other node passes.
			var err error
			eventuallyErr(t, "node patch on another node refused", func() bool {
				_, err = c.CoreV1().Nodes().Patch(ctx, other, types.MergePatchType, annotate, metav1.PatchOptions{})
				return apierrors.IsForbidden(err) || apierrors.IsInvalid(err)
			}, &err)
			if _, err := c.CoreV1().Nodes().Patch(ctx, own, types.MergePatchType, annotate, metav1.PatchOptions{}); err != nil {
				t.Fatalf("patch own node: %v", err)
			}
			// On its own node: the status annotation and the startup taint,
			// nothing else.
			for what, patch := range map[string]string{
				"label its node":              `{"metadata":{"labels":{"x":"y"}}}`,
				"annotate its node otherwise": `{"metadata":{"annotations":{"x":"y"}}}`,
				"cordon its node":             `{"spec":{"unschedulable":true}}`,
				"taint its node":              `{"spec":{"taints":[{"key":"mesh-cni.io/not-ready","effect":"NoSchedule"},{"key":"other","effect":"NoSchedule"},{"key":"new","effect":"NoExecute"}]}}`,
				"remove another taint":        `{"spec":{"taints":[{"key":"mesh-cni.io/not-ready","effect":"NoSchedule"}]}}`,
			} {
				_, err := c.CoreV1().Nodes().Patch(ctx, own, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
				refused(t, what, err)
			}
			if err := taint.Remove(ctx, c.CoreV1(), own, "mesh-cni.io/not-ready"); err != nil {
				t.Fatalf("remove the startup taint from its node: %v", err)
			}

			switch policy {
			case repair.Delete:
				err := c.CoreV1().Pods(apps).Delete(ctx, "theirs", metav1.DeleteOptions{})
				refused(t, "delete a pod on another node", err)
				if err := c.CoreV1().Pods(apps).Delete(ctx, "mine", metav1.DeleteOptions{}); err != nil {
					t.Fatalf("delete a pod on its node: %v", err)
				}
			case repair.Label:
				label := []byte(`{"metadata":{"labels":{"mesh-cni.io/uninitialized":"true"}}}`)
				_, err := c.CoreV1().Pods(apps).Patch(ctx, "theirs", types.MergePatchType, label, metav1.PatchOptions{}, "status")
				refused(t, "label a pod on another node", err)
				p, err := c.CoreV1().Pods(apps).Patch(ctx, "mine", types.MergePatchType, label, metav1.PatchOptions{}, "status")
				if err != nil {
					t.Fatalf("label a pod on its node: %v", err)
				}
				if p.Labels["mesh-cni.io/uninitialized"] != "true" {
					t.Fatalf("status patch did not keep the label: %v", p.Labels)
				}
				spec := []byte(`{"spec":{"containers":[{"name":"app","image":"evil:1"}]}}`)
				p, err = c.CoreV1().Pods(apps).Patch(ctx, "mine", types.StrategicMergePatchType, spec, metav1.PatchOptions{}, "status")
				if err == nil && p.Spec.Containers[0].Image != "app:1" {
					t.Fatalf("pods/status patch changed the image: %s", p.Spec.Containers[0].Image)
				}
			}
		})
	}
}

// The kubeconfig the agent writes for the plugin holds a token of the
// plugin's ServiceAccount, which may get pods and do nothing else the chart
// grants to any of its accounts; the agent can mint tokens for that account
// only.
func TestPluginTokenOnlyGetsPods(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	ns := env.Namespace(t, "mesh-cni")
	env.Node(t, "plugin-node")
	sa, _, rules := installRules(t, env, "mesh-cni", ns, map[string]any{
		"repair":       map[string]any{"enabled": true, "policy": "label"},
		"startupTaint": map[string]any{"enabled": true},
		"metrics":      map[string]any{"bindAddress": ""}, // tokenreviews, subjectaccessreviews
	})
	c := agentClient(t, env, ns, sa, "plugin-node")
	apps := env.Namespace(t, "apps")
	brokenPod(t, env, apps, "web", "plugin-node")

	out := filepath.Join(t.TempDir(), "kubeconfig")
	req := &kubeconfig.TokenRequester{Client: c.CoreV1(), Namespace: ns, Name: "mesh-cni-plugin", Node: "plugin-node"}
	if _, err := kubeconfig.Write(out, kubeconfig.Options{Host: "10.96.0.1", Port: "443", Tokens: req}); err != nil {
		t.Fatalf("write the plugin's kubeconfig as the agent: %v", err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var kc kubeconfig.Config
	if err := json.Unmarshal(b, &kc); err != nil {
		t.Fatal(err)
	}
	plugin, err := kubernetes.NewForConfig(env.TokenConfig(kc.Users[0].User.Token))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plugin.CoreV1().Pods(apps).Get(ctx, "web", metav1.GetOptions{}); err != nil {
		t.Fatalf("get pods with the plugin's token: %v", err)
	}

	// Every verb on every resource any of the chart's roles names, plus the
	// verbs a role could hold on them.
	verbs := []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
	seen := map[string]bool{}
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range append(verbs, r.Verbs...) {
					res, sub, _ := strings.Cut(res, "/")
					key := g + "|" + res + "|" + sub + "|" + v
					if seen[key] {
						continue
					}
					seen[key] = true
					rev, err := plugin.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authzv1.SelfSubjectAccessReview{
						Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authzv1.ResourceAttributes{
							Namespace: apps, Group: g, Resource: res, Subresource: sub, Verb: v,
						}},
					}, metav1.CreateOptions{})
					if err != nil {
						t.Fatal(err)
					}
					want := g == "" && res == "pods" && sub == "" && v == "get"
					if rev.Status.Allowed != want {
						t.Errorf("plugin token: %s %s/%s in group %q allowed=%v, want %v", v, res, sub, g, rev.Status.Allowed, want)
					}
				}
			}
		}
	}
	if len(seen) < 50 {
		t.Fatalf("only %d checks: the chart's rules were not read", len(seen))
	}

	// The agent mints tokens for that account only.
	for _, other := range []string{sa, "default"} {
		_, err := c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, other, &authv1.TokenRequest{}, metav1.CreateOptions{})
		forbidden(t, "token for "+other, err)
	}
}

// Why evict is not the default: the admission request of an eviction holds
// the Eviction, not the pod, and the deletion it causes is not admitted
// again, so the own-node policy cannot keep it on the agent's node.
func TestEvictionNotConfinedToOwnNode(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	ns := env.Namespace(t, "mesh-cni")
	env.Node(t, "evict-own")
	env.Node(t, "evict-other")
	sa, _ := install(t, env, "evict", ns, map[string]any{"repair": map[string]any{"enabled": true, "policy": "evict"}})
	c := agentClient(t, env, ns, sa, "evict-own")
	apps := env.Namespace(t, "apps")
	brokenPod(t, env, apps, "theirs", "evict-other")
	annotate := []byte(`{"metadata":{"annotations":{"mesh-cni.io/agent-status":"{}"}}}`)
	var err error
	eventuallyErr(t, "own-node policy active", func() bool {
		_, err = c.CoreV1().Nodes().Patch(ctx, "evict-other", types.MergePatchType, annotate, metav1.PatchOptions{})
		return err != nil
	}, &err)
	err = c.CoreV1().Pods(apps).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "theirs", Namespace: apps}})
	if err != nil {
		t.Fatalf("eviction of a pod on another node: %v; if the API server now refuses it, evict can be confined and reconsidered as the default", err)
	}
}

// refused: RBAC (Forbidden) or the own-node admission policy (Invalid or
// Forbidden, by its reason) turned the request down.
func refused(t *testing.T, what string, err error) {
	t.Helper()
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
		t.Errorf("%s: want refused, got %v", what, err)
	}
}

func eventuallyErr(t *testing.T, what string, cond func() bool, last *error) {
	t.Helper()
	testenv.Eventually(t, "waiting for "+what, func() error {
		if !cond() {
			return fmt.Errorf("last: %w", *last)
		}
		return nil
	})
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
	hc := &http.Client{Timeout: testenv.Timeout(), Transport: &http.Transport{
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
	// Watched by name, as the agent does to see a deletion.
	w, err := c.AppsV1().DaemonSets(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + ds})
	if err != nil {
		t.Fatalf("watch own DaemonSet as the agent: %v", err)
	}
	w.Stop()
	_, err = c.AppsV1().DaemonSets(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=someone-else"})
	forbidden(t, "watch another DaemonSet", err)
	_, err = c.AppsV1().DaemonSets(ns).Watch(ctx, metav1.ListOptions{})
	forbidden(t, "watch DaemonSets", err)
}

func forbidden(t *testing.T, what string, err error) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Errorf("%s: want Forbidden, got %v", what, err)
	}
}
