package chart

import (
	"bufio"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/mesh-cni/mesh-cni/internal/mesh"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// The `helm test` pod plays the contract of the first enabled of linkerd
// and istio with that profile's settings (internal/mesh's defaults under the
// values), and the real API server admits it under Pod Security
// "restricted" in the namespace the hook creates. The agents-ready pod's
// command, run with its hook ServiceAccount's token, fails unless every
// node's agent is ready, and that token can do nothing else.
func TestHelmTestPod(t *testing.T) {
	env, c := newAPIClient(t)
	off := false
	for _, tc := range []struct {
		name    string
		values  map[string]any
		profile string
		uid     int
		port    int
	}{
		{"default", nil, mesh.Linkerd, 0, 0},
		{"linkerd-ports", map[string]any{"meshes": map[string]any{"linkerd": map[string]any{"outboundPort": 5140, "proxyUID": 3000}}}, mesh.Linkerd, 3000, 5140},
		{"istio-only", map[string]any{"meshes": map[string]any{"linkerd": map[string]any{"enabled": off}, "istio": map[string]any{"proxyUID": 1000700000}}}, mesh.Istio, 1000700000, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := mesh.Config{}.WithDefaults(tc.profile)
			if tc.uid == 0 {
				tc.uid = int(*want.ProxyUID)
			}
			if tc.port == 0 {
				tc.port = want.OutboundPort
			}
			rel := "rel-" + tc.name
			r, err := Render(chartDir, Options{Release: rel, Values: tc.values})
			if err != nil {
				t.Fatal(err)
			}
			objs, err := Objects(r.Tests)
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for _, o := range objs {
				kinds = append(kinds, o.Kind)
			}
			if want := []string{"Namespace", "ServiceAccount", "Role", "RoleBinding", "Pod", "Pod"}; !slices.Equal(kinds, want) {
				t.Fatalf("test hooks %v, want %v", kinds, want)
			}
			hookOrder(t, objs)
			pod := hook(t, objs, "Pod", rel+"-mesh-cni-test-redirect").Raw
			redirectPod(t, pod, want, tc.uid, tc.port)
			admitRedirectPod(t, c, objs, pod)
			agentsReady(t, env, c, rel, r, objs)
		})
	}

	// Without the chart's RBAC there is no Role to grant the check: only
	// the redirect test is rendered.
	r, err := Render(chartDir, Options{Release: "rel-norbac", Values: map[string]any{"rbac": map[string]any{"create": false}, "repair": map[string]any{"enabled": false}}})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Objects(r.Tests)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range objs {
		names = append(names, o.Kind+"/"+o.Name)
	}
	if want := []string{"Namespace/rel-norbac-mesh-cni-test", "Pod/rel-norbac-mesh-cni-test-redirect"}; !slices.Equal(names, want) {
		t.Errorf("rbac.create=false: test hooks %v, want %v", names, want)
	}
}

// redirectPod checks the redirect test pod: the validator next to a
// sidecar named and running as the mesh's proxy, so the rules redirect the
// validator and exempt the proxy.
func redirectPod(t *testing.T, pod map[string]any, want mesh.Config, uid, port int) {
	containers, _, _ := unstructured.NestedSlice(pod, "spec", "containers")
	if len(containers) != 2 {
		t.Fatalf("containers: %v", containers)
	}
	app, proxy := containers[0].(map[string]any), containers[1].(map[string]any)
	if proxy["name"] != want.Sidecar {
		t.Errorf("sidecar %v, want %s", proxy["name"], want.Sidecar)
	}
	if got := number(proxy, "securityContext", "runAsUser"); got != int64(uid) {
		t.Errorf("proxy UID %d, want %d", got, uid)
	}
	if cmd := fmt.Sprint(app["command"]); cmd != fmt.Sprintf("[/mesh-cni-validator --outbound-port=%d]", port) {
		t.Errorf("validator command %s, want outbound port %d", cmd, port)
	}
	if got := number(app, "securityContext", "runAsUser"); got == int64(uid) {
		t.Errorf("validator runs as the proxy UID %d: the rules exempt it", got)
	}
}

// admitRedirectPod creates the test namespace (and the ServiceAccount
// kube-controller-manager would put in it) and checks that the API server
// admits the pod there and refuses one that may escalate.
func admitRedirectPod(t *testing.T, c *apiClient, objs []Object, pod map[string]any) {
	ns := objs[0].Raw
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	_, err := c.dyn.Resource(gvr).Create(context.Background(), &unstructured.Unstructured{Object: ns}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// What kube-controller-manager creates in every new namespace.
	sa := map[string]any{"apiVersion": "v1", "kind": "ServiceAccount",
		"metadata": map[string]any{"name": "default", "namespace": objs[0].Name}}
	_, err = c.dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}).
		Namespace(objs[0].Name).Create(context.Background(), &unstructured.Unstructured{Object: sa}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if err := c.dryRun(context.Background(), pod); err != nil {
		t.Errorf("the API server refuses the test pod: %v", err)
	}
	if w := c.warn.take(); len(w) > 0 {
		t.Errorf("API server warnings: %v", w)
	}
	// The namespace enforces "restricted": a pod that may escalate is refused.
	bad := (&unstructured.Unstructured{Object: pod}).DeepCopy().Object
	bc, _, _ := unstructured.NestedSlice(bad, "spec", "containers")
	delete(bc[0].(map[string]any)["securityContext"].(map[string]any), "allowPrivilegeEscalation")
	_ = unstructured.SetNestedSlice(bad, bc, "spec", "containers")
	if err := c.dryRun(context.Background(), bad); err == nil {
		t.Errorf("namespace %s does not enforce restricted: a pod allowing privilege escalation was admitted", objs[0].Name)
	}
	c.warn.take()
}

// hook finds the test hook of kind and name.
func hook(t *testing.T, objs []Object, kind, name string) Object {
	t.Helper()
	for _, o := range objs {
		if o.Kind == kind && o.Name == name {
			return o
		}
	}
	t.Fatalf("no test hook %s %s", kind, name)
	return Object{}
}

// hookOrder: Helm runs test hooks by weight, and hooks of one weight by
// name, not kind. The weights must create the namespace before what lives
// in it, and the ServiceAccount, Role and RoleBinding before the pods.
func hookOrder(t *testing.T, objs []Object) {
	t.Helper()
	weight := func(o Object) int {
		w, _, _ := unstructured.NestedString(o.Raw, "metadata", "annotations", "helm.sh/hook-weight")
		if w == "" {
			return 0
		}
		n, err := strconv.Atoi(w)
		if err != nil {
			t.Fatalf("%s %s: hook weight %q", o.Kind, o.Name, w)
		}
		return n
	}
	rank := map[string]int{"Namespace": 0, "ServiceAccount": 1, "Role": 1, "RoleBinding": 2, "Pod": 3}
	for _, a := range objs {
		for _, b := range objs {
			if rank[a.Kind] < rank[b.Kind] && weight(a) >= weight(b) {
				t.Errorf("hook %s %s (weight %d) must run before %s %s (weight %d)", a.Kind, a.Name, weight(a), b.Kind, b.Name, weight(b))
			}
		}
	}
}

// agentsReady runs the agents-ready test pod's command, as rendered, with
// a token of the hook's ServiceAccount bound by the hook's Role and
// RoleBinding, against the rendered agent DaemonSet: it fails while the
// DaemonSet's status has a node without an updated, ready agent, passes
// once every node has one, and the token can do nothing else.
func agentsReady(t *testing.T, env *testenv.Env, c *apiClient, rel string, r *Rendered, objs []Object) {
	t.Helper()
	full := rel + "-mesh-cni"
	sa, ns, command := applyAgentsReady(t, c, full, r, objs)
	tok, dir := podCredentials(t, env, sa)
	u, err := url.Parse(env.Host)
	if err != nil {
		t.Fatal(err)
	}
	bin := testenv.GoBinary(t, "installer", "mesh-cni-agent")
	cmdFor := func(extra ...string) *exec.Cmd {
		cmd := exec.Command(bin, append(append(command[1:], "--token-path="+filepath.Join(dir, "token")), extra...)...)
		cmd.Env = append(os.Environ(), "KUBERNETES_SERVICE_HOST="+u.Hostname(), "KUBERNETES_SERVICE_PORT="+u.Port())
		return cmd
	}
	setStatus := func(ready int32) {
		t.Helper()
		ctx := context.Background()
		d, err := env.Client.AppsV1().DaemonSets(ns).Get(ctx, full, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		d.Status = appsv1.DaemonSetStatus{ObservedGeneration: d.Generation, DesiredNumberScheduled: 3,
			CurrentNumberScheduled: 3, UpdatedNumberScheduled: 3, NumberReady: ready, NumberAvailable: ready, NumberUnavailable: 3 - ready}
		if _, err := env.Client.AppsV1().DaemonSets(ns).UpdateStatus(ctx, d, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	agentsReadyWaits(t, cmdFor, setStatus)
	agentsReadyPrivilege(t, env, tok, ns, full)
}

// applyAgentsReady applies the hook's ServiceAccount, Role and RoleBinding
// and the DaemonSet it watches, checks that the API server admits the pod,
// and returns the ServiceAccount, the namespace and the pod's command.
func applyAgentsReady(t *testing.T, c *apiClient, full string, r *Rendered, objs []Object) (sa Object, ns string, command []string) {
	t.Helper()
	ctx := context.Background()
	sa = hook(t, objs, "ServiceAccount", full+"-test")
	role := hook(t, objs, "Role", full+"-test")
	binding := hook(t, objs, "RoleBinding", full+"-test")
	pod := hook(t, objs, "Pod", full+"-test-agents")
	manifest, err := Objects(r.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	var ds map[string]any
	for _, o := range manifest {
		if o.Kind == "DaemonSet" {
			ds = o.Raw
		}
	}
	if ds == nil {
		t.Fatal("no DaemonSet rendered")
	}
	ns, _, _ = unstructured.NestedString(ds, "metadata", "namespace")
	for _, o := range []map[string]any{sa.Raw, role.Raw, binding.Raw, ds} {
		if err := c.apply(ctx, o, false); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := c.remove(context.Background(), o); err != nil {
				t.Error(err)
			}
		})
	}
	c.warn.take()
	// Pod Security "restricted" admits the pod, its ServiceAccount exists.
	if err := c.dryRun(ctx, pod.Raw); err != nil {
		t.Errorf("the API server refuses the agents-ready pod: %v", err)
	}
	if w := c.warn.take(); len(w) > 0 {
		t.Errorf("API server warnings: %v", w)
	}
	spec := pod.Raw["spec"].(map[string]any)
	if spec["serviceAccountName"] != sa.Name || spec["automountServiceAccountToken"] != true {
		t.Errorf("agents-ready pod: serviceAccountName %v, automountServiceAccountToken %v; want %s, true",
			spec["serviceAccountName"], spec["automountServiceAccountToken"], sa.Name)
	}
	containers, _, _ := unstructured.NestedSlice(pod.Raw, "spec", "containers")
	if len(containers) != 1 {
		t.Fatalf("agents-ready pod containers: %v", containers)
	}
	for _, a := range containers[0].(map[string]any)["command"].([]any) {
		command = append(command, a.(string))
	}
	if len(command) < 2 || command[0] != "/mesh-cni-agent" {
		t.Fatalf("agents-ready command %v, want /mesh-cni-agent ...", command)
	}
	return sa, ns, command
}

// podCredentials is what the kubelet gives the pod: the ServiceAccount's
// token with the CA next to it, in dir.
func podCredentials(t *testing.T, env *testenv.Env, sa Object) (tok, dir string) {
	t.Helper()
	tok, err := env.Token(context.Background(), sa.Raw["metadata"].(map[string]any)["namespace"].(string), sa.Name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), env.CAData, 0o600); err != nil {
		t.Fatal(err)
	}
	return tok, dir
}

// agentsReadyWaits runs the hook's command against the DaemonSet's status:
// it fails while an agent stays not ready, waits while the agents start,
// and passes once every one is ready.
func agentsReadyWaits(t *testing.T, cmdFor func(extra ...string) *exec.Cmd, setStatus func(ready int32)) {
	t.Helper()
	run := func(extra ...string) (string, error) {
		t.Helper()
		out, err := cmdFor(extra...).CombinedOutput()
		return string(out), err
	}
	setStatus(2)
	if out, err := run("--wait=1s"); err == nil || !strings.Contains(out, "3 desired, 3 updated, 2 ready") || !strings.Contains(out, "not ready after 1s") {
		t.Errorf("agents-ready with a node whose agent stays not ready: %v\n%s", err, out)
	}
	// Right after an install the agents are still starting: the pod, as
	// rendered, waits for them instead of failing at its first look.
	cmd := cmdFor()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "waiting: ") {
		t.Fatalf("agents-ready did not report waiting: %q %s", lines.Text(), stderr.String())
	}
	setStatus(3)
	var last string
	for lines.Scan() {
		last = lines.Text()
	}
	if err := cmd.Wait(); err != nil || !strings.Contains(last, "every node's agent is ready") {
		t.Errorf("agents-ready once the last agent became ready: %v %q %s", err, last, stderr.String())
	}
	setStatus(3)
	if out, err := run(); err != nil || !strings.Contains(out, "every node's agent is ready") {
		t.Errorf("agents-ready with every agent ready: %v\n%s", err, out)
	}
}

// agentsReadyPrivilege checks least privilege: the hook's token may get
// that one DaemonSet, nothing else.
func agentsReadyPrivilege(t *testing.T, env *testenv.Env, tok, ns, full string) {
	t.Helper()
	ctx := context.Background()
	tc, err := kubernetes.NewForConfig(env.TokenConfig(tok))
	if err != nil {
		t.Fatal(err)
	}
	for what, err := range map[string]error{
		"get another DaemonSet": func() error {
			_, err := tc.AppsV1().DaemonSets(ns).Get(ctx, full+"-other", metav1.GetOptions{})
			return err
		}(),
		"list DaemonSets": func() error { _, err := tc.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{}); return err }(),
		"get it elsewhere": func() error {
			_, err := tc.AppsV1().DaemonSets("default").Get(ctx, full, metav1.GetOptions{})
			return err
		}(),
		"get pods": func() error { _, err := tc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); return err }(),
		"patch it": func() error {
			_, err := tc.AppsV1().DaemonSets(ns).Patch(ctx, full, types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
			return err
		}(),
	} {
		if !apierrors.IsForbidden(err) {
			t.Errorf("the agents-ready token may %s: %v, want Forbidden", what, err)
		}
	}
}

// number reads an integer field of a decoded manifest (JSON numbers).
func number(obj map[string]any, path ...string) int64 {
	v, _, _ := unstructured.NestedFieldNoCopy(obj, path...)
	switch n := v.(type) {
	case float64:
		return int64(n)
	case int64:
		return n
	}
	return -1
}
