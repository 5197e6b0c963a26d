package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/mesh-cni/mesh-cni/internal/agent"
	"github.com/mesh-cni/mesh-cni/internal/node"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/helmcli"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// agentClient sets up namespace, the chart's RBAC for the agent's service
// account (rendered from charts/mesh-cni, nothing added), a Node and the
// DaemonSet, and returns a client that is the agent's service account.
func agentClient(t testing.TB, env *testenv.Env) (ns string, client kubernetes.Interface, token string) {
	t.Helper()
	ctx := context.Background()
	ns = env.Namespace(t, "mesh-cni")
	r, err := helmcli.Render("../charts/mesh-cni", helmcli.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := helmcli.Objects(r.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	rbac := env.Client.RbacV1()
	n := 0
	for _, o := range objs {
		raw, _ := json.Marshal(o.Raw)
		var err error
		switch o.Kind {
		case "ClusterRole":
			var v rbacv1.ClusterRole
			json.Unmarshal(raw, &v)
			v.Name = ns + "-" + v.Name // cluster-scoped: one per test
			_, err = rbac.ClusterRoles().Create(ctx, &v, metav1.CreateOptions{})
			t.Cleanup(func() { rbac.ClusterRoles().Delete(ctx, v.Name, metav1.DeleteOptions{}) })
		case "ClusterRoleBinding":
			var v rbacv1.ClusterRoleBinding
			json.Unmarshal(raw, &v)
			v.Name = ns + "-" + v.Name
			v.RoleRef.Name = ns + "-" + v.RoleRef.Name
			_, err = rbac.ClusterRoleBindings().Create(ctx, &v, metav1.CreateOptions{})
			t.Cleanup(func() { rbac.ClusterRoleBindings().Delete(ctx, v.Name, metav1.DeleteOptions{}) })
		case "Role":
			var v rbacv1.Role
			json.Unmarshal(raw, &v)
			_, err = rbac.Roles(ns).Create(ctx, &v, metav1.CreateOptions{})
		case "RoleBinding":
			var v rbacv1.RoleBinding
			json.Unmarshal(raw, &v)
			_, err = rbac.RoleBindings(ns).Create(ctx, &v, metav1.CreateOptions{})
		default:
			continue
		}
		if err != nil {
			t.Fatalf("%s %s: %v", o.Kind, o.Name, err)
		}
		n++
	}
	if n < 4 {
		t.Fatalf("chart rendered only %d RBAC objects", n)
	}
	token, err = env.Token(ctx, ns, "mesh-cni", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// The plugin's ServiceAccount, whose tokens the agent writes to the host.
	if _, err := env.Token(ctx, ns, "mesh-cni-plugin", time.Hour); err != nil {
		t.Fatal(err)
	}
	client, err = kubernetes.NewForConfig(env.TokenConfig(token))
	if err != nil {
		t.Fatal(err)
	}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "mesh-cni", Namespace: ns},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "mesh-cni"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "mesh-cni"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "mesh-cni:test"}}},
			},
		},
	}
	if _, err := env.Client.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns, client, token
}

func TestShouldUninstall(t *testing.T) {
	env := testenv.Start(t)
	ns, client, _ := agentClient(t, env)
	ctx := context.Background()
	ds := client.AppsV1()
	cfg := &config{uninstallMode: "auto", namespace: ns, daemonSetName: "mesh-cni"}
	if u, why := shouldUninstall(ds, cfg, seen(true)); u {
		t.Fatalf("uninstall while the DaemonSet exists: %s", why)
	}
	// Another DaemonSet name: the chart's Role does not grant it. Without
	// an earlier successful GET a 403 proves nothing: keep everything.
	other := *cfg
	other.daemonSetName = "someone-else"
	if u, why := shouldUninstall(ds, &other, seen(false)); u || !strings.Contains(why, "cannot look up") {
		t.Fatalf("got %v %s", u, why)
	}
	// Being deleted (foreground deletion holds it with a finalizer).
	dsc := env.Client.AppsV1().DaemonSets(ns)
	patch := []byte(`{"metadata":{"finalizers":["mesh-cni.io/test"]}}`)
	if _, err := dsc.Patch(ctx, "mesh-cni", "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := dsc.Delete(ctx, "mesh-cni", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if u, why := shouldUninstall(ds, cfg, seen(true)); !u || !strings.Contains(why, "being deleted") {
		t.Fatalf("got %v %s", u, why)
	}
	if _, err := dsc.Patch(ctx, "mesh-cni", "application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { u, why := shouldUninstall(ds, cfg, seen(true)); return u && strings.Contains(why, "gone") })
	for mode, want := range map[string]bool{"always": true, "never": false} {
		c := *cfg
		c.uninstallMode = mode
		if u, _ := shouldUninstall(nil, &c, seen(false)); u != want {
			t.Errorf("%s: %v", mode, u)
		}
	}
	if u, _ := shouldUninstall(nil, cfg, seen(true)); u {
		t.Error("auto without API access uninstalled")
	}

	// refused waits until the lookup is answered with the error is
	// matches: that alone never uninstalls; a deletion seen before does.
	refused := func(code string, is func(error) bool) {
		t.Helper()
		waitFor(t, func() bool {
			_, err := ds.DaemonSets(ns).Get(ctx, "mesh-cni", metav1.GetOptions{})
			return is(err)
		})
		if u, why := shouldUninstall(ds, cfg, seen(false)); u || !strings.Contains(why, "cannot look up") {
			t.Errorf("%s uninstalled: %v %s", code, u, why)
		}
		if u, why := shouldUninstall(ds, cfg, seen(true)); !u || !strings.Contains(why, "was deleted") {
			t.Errorf("%s after a deletion seen: got %v %s", code, u, why)
		}
	}
	// The binding goes: a 403 is never an uninstall by itself (an RBAC
	// change during a rollout); only a deletion the watch saw before is.
	if err := env.Client.RbacV1().RoleBindings(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	refused("403", apierrors.IsForbidden)
	// The ServiceAccount goes: its tokens stop working (401).
	if err := env.Client.CoreV1().ServiceAccounts(ns).Delete(ctx, "mesh-cni", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	refused("401", apierrors.IsUnauthorized)
}

func TestDecide(t *testing.T) {
	gr := schema.GroupResource{Group: "apps", Resource: "daemonsets"}
	for _, c := range []struct {
		name        string
		err         error
		seenDeleted bool
		want        bool
	}{
		{"not found", apierrors.NewNotFound(gr, "mesh-cni"), false, true},
		{"unauthorized", apierrors.NewUnauthorized("token"), false, false},
		{"unauthorized after a deletion seen", apierrors.NewUnauthorized("token"), true, true},
		{"forbidden", apierrors.NewForbidden(gr, "mesh-cni", errors.New("no")), false, false},
		{"forbidden after a deletion seen", apierrors.NewForbidden(gr, "mesh-cni", errors.New("no")), true, true},
		{"timeout", apierrors.NewTimeoutError("slow", 1), false, false},
		{"server error", apierrors.NewInternalError(errors.New("etcd")), false, false},
		{"unreachable", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, false, false},
		{"deadline", context.DeadlineExceeded, false, false},
	} {
		if got, why := decide(c.err, seen(c.seenDeleted), "ns/mesh-cni"); got != c.want {
			t.Errorf("%s: got %v (%s)", c.name, got, why)
		}
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(testenv.Timeout())
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestAgentAgainstAPIServer runs the real agent binary with the chart's
// RBAC against a real kube-apiserver: it installs, publishes its status on
// the Node, writes a kubeconfig that works, follows a token rotation (with
// --allow-agent-token-for-plugin, the agent's own token), keeps
// everything on SIGTERM while the DaemonSet exists, and uninstalls cleanly
// once it is gone.
func TestAgentAgainstAPIServer(t *testing.T) {
	env := testenv.Start(t)
	ns, _, token := agentClient(t, env)
	ctx := context.Background()
	nodeName := "node-" + ns
	const startupTaint = "mesh-cni.io/agent-not-ready"
	env.Node(t, nodeName, corev1.Taint{Key: startupTaint, Effect: corev1.TaintEffectNoSchedule})
	bin := buildAgent(t)

	root := t.TempDir()
	d := func(p string) string { return filepath.Join(root, p) }
	for _, p := range []string{"host/opt/cni/bin", "host/etc/cni/net.d", "sa", "img"} {
		os.MkdirAll(d(p), 0o755)
	}
	orig, err := os.ReadFile("../internal/agent/install/testdata/conflists/kindnet-ipv4.conflist")
	if err != nil {
		t.Fatal(err)
	}
	primary := d("host/etc/cni/net.d/10-kindnet.conflist")
	os.WriteFile(primary, orig, 0o644)
	os.WriteFile(d("sa/token"), []byte(token), 0o600)
	os.WriteFile(d("sa/ca.crt"), env.CAData, 0o600)
	os.WriteFile(d("img/mesh-cni"), []byte("plugin"), 0o755)
	os.WriteFile(d("img/mesh-cni-podget"), []byte("podget"), 0o755)
	os.WriteFile(d("img/plugin.json"), []byte(`{"type":"mesh-cni","backend":"nftables"}`), 0o644)
	primaryPlugins(t, d("host/opt/cni/bin"), orig)
	u, _ := url.Parse(env.Host)
	probe := freeAddrT(t)

	var logs testenv.Buffer
	start := func() *exec.Cmd {
		return startAgent(t, bin, u, nodeName, ns, &logs, "--cni-bin-dir", d("host/opt/cni/bin"), "--cni-conf-dir", d("host/etc/cni/net.d"),
			"--state-dir", d("host/var/lib/mesh-cni"), "--run-dir", d("host/var/run/mesh-cni"),
			"--plugin-config", d("img/plugin.json"), "--plugin-binary", d("img/mesh-cni"), "--podget-binary", d("img/mesh-cni-podget"),
			"--token-path", d("sa/token"), "--probe-addr", probe, "--metrics-addr", freeAddrT(t),
			"--startup-taint", startupTaint, "--log-level=debug",
			// The unsafe mode, whose kubeconfig follows the agent's token
			// file through a rotation (the default is startAgentRig's).
			"--plugin-service-account=", "--allow-agent-token-for-plugin")
	}
	readyz := func() bool {
		r, err := http.Get("http://" + probe + "/readyz")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == 200
	}
	cmd := start()
	waitFor(t, readyz)
	status := func() *agent.Status {
		n, err := env.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		raw, ok := n.Annotations[agent.StatusAnnotation]
		if !ok {
			return nil
		}
		var st agent.Status
		if err := json.Unmarshal([]byte(raw), &st); err != nil {
			t.Fatalf("status annotation %q: %v", raw, err)
		}
		return &st
	}
	waitFor(t, func() bool {
		st := status()
		return st != nil && st.Ready
	})
	// Ready: the startup taint goes, the pod cache answers on agent.sock.
	waitFor(t, func() bool {
		n, err := env.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, tn := range n.Spec.Taints {
			if tn.Key == startupTaint {
				return false
			}
		}
		return true
	})
	if fi, err := os.Stat(d("host/var/run/mesh-cni/agent.sock")); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("agent.sock: %v", err)
	}
	st := status()
	if st.Conf != primary || st.Backend != "nftables" || st.Version == "" || st.Kubeconfig == "" {
		t.Errorf("status %+v", st)
	}

	// The kubeconfig the plugin will use works against the API server.
	kc := d("host/var/lib/mesh-cni/kubeconfig")
	fi, err := os.Stat(kc)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig: %v %v", fi, err)
	}
	useKubeconfig := func() error {
		rc, err := clientcmd.BuildConfigFromFlags("", kc)
		if err != nil {
			return err
		}
		c, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return err
		}
		_, err = c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err
	}
	if err := useKubeconfig(); err != nil {
		t.Fatalf("plugin kubeconfig does not work: %v", err)
	}
	// Token rotation, as kubelet does it (a new file swapped in).
	tok2, err := env.Token(ctx, ns, "mesh-cni", 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(d("sa/.token-new"), []byte(tok2), 0o600)
	os.Rename(d("sa/.token-new"), d("sa/token"))
	waitFor(t, func() bool { b, _ := os.ReadFile(kc); return bytes.Contains(b, []byte(tok2)) })
	if err := useKubeconfig(); err != nil {
		t.Fatalf("rotated kubeconfig does not work: %v", err)
	}

	readySince := status().Time
	// SIGTERM while the DaemonSet exists: everything stays.
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("agent exit: %v", err)
	}
	for _, p := range []string{"host/opt/cni/bin/mesh-cni", "host/opt/cni/bin/mesh-cni-podget", "host/var/lib/mesh-cni/kubeconfig", "host/var/run/mesh-cni/ready"} {
		if _, err := os.Stat(d(p)); err != nil {
			t.Errorf("%s gone after a restart-type stop: %v", p, err)
		}
	}
	if b, _ := os.ReadFile(primary); !bytes.Contains(b, []byte(`"mesh-cni"`)) {
		t.Error("chain entry removed on a restart-type stop")
	}

	// Restart, then delete the DaemonSet and stop: a real uninstall.
	// The restart keeps the ready time: nothing left the node meanwhile.
	time.Sleep(1100 * time.Millisecond) // the time has one-second resolution
	cmd = start()
	waitFor(t, readyz)
	if m, err := node.ReadMarker(d("host/var/run/mesh-cni/ready")); err != nil || !m.Time.Equal(readySince) {
		t.Errorf("marker after a restart: %+v %v; ready since %v", m, err, readySince)
	}
	// The Node status follows readyz: the restart publishes "install not
	// checked yet" first, then ready with the carried-over time.
	waitFor(t, func() bool { st = status(); return st != nil && st.Ready })
	if !st.Time.Equal(readySince) {
		t.Errorf("Node status after a restart: %+v; ready since %v", st, readySince)
	}
	if err := env.Client.AppsV1().DaemonSets(ns).Delete(ctx, "mesh-cni", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("agent exit: %v", err)
	}
	if b, _ := os.ReadFile(primary); !bytes.Equal(b, orig) {
		t.Errorf("primary not restored:\n%s", b)
	}
	for _, p := range []string{"host/opt/cni/bin/mesh-cni", "host/opt/cni/bin/mesh-cni-podget", "host/var/lib/mesh-cni/kubeconfig", "host/var/run/mesh-cni/ready"} {
		if _, err := os.Stat(d(p)); !os.IsNotExist(err) {
			t.Errorf("%s left after uninstall: %v", p, err)
		}
	}
	if st := status(); st != nil {
		t.Errorf("status annotation left after uninstall: %+v", st)
	}
	// Everything the agent did, it was allowed to do by the chart's RBAC.
	if l := logs.String(); strings.Contains(l, "forbidden") {
		t.Errorf("the chart's RBAC forbade something:\n%s", l)
	}
}

// startAgent runs the agent binary as a pod on nodeName in ns would run,
// against the API server at u; it is killed when the test ends.
func startAgent(t *testing.T, bin string, u *url.URL, nodeName, ns string, logs *testenv.Buffer, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KUBERNETES_SERVICE_HOST="+u.Hostname(), "KUBERNETES_SERVICE_PORT="+u.Port(),
		"NODE_NAME="+nodeName, "POD_NAMESPACE="+ns)
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("agent log:\n%s", logs.String())
		}
	})
	return cmd
}

func buildAgent(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("MESH_CNI_AGENT_BIN"); b != "" {
		return b
	}
	bin := filepath.Join(t.TempDir(), "mesh-cni-agent")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

func freeAddrT(t *testing.T) string {
	t.Helper()
	l, err := netListen()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
