package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mesh-cni/mesh-cni/internal/agent"
	"github.com/mesh-cni/mesh-cni/internal/agent/podrules"
	"github.com/mesh-cni/mesh-cni/internal/backend/finding"
	"github.com/mesh-cni/mesh-cni/internal/backend/nftables"
	"github.com/mesh-cni/mesh-cni/internal/ctl/check"
	"github.com/mesh-cni/mesh-cni/internal/ctl/explain"
	"github.com/mesh-cni/mesh-cni/internal/rules"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// hostIP is an address of this host that is not loopback: the API server
// refuses to proxy to a pod IP on loopback.
func hostIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
			return n.IP.String()
		}
	}
	t.Skip("no non-loopback IPv4 address on this host for the API server to proxy to")
	return ""
}

// meshedNetns is a real netns holding ip on eth0 and the rules ADD writes
// for pod with entry (the real nftables backend), bind-mounted into a
// netns dir as a runtime's.
func meshedNetns(t *testing.T, pod *corev1.Pod, entry []byte, ip string) (dir string, n ns.NetNS) {
	t.Helper()
	dir = t.TempDir()
	n = testenv.RuntimeNS(t, dir, "cni-1234", ip+"/24")
	o := explain.NewOptions()
	o.PodManifest, _ = json.Marshal(pod)
	o.Entry = entry
	_, rs, err := explain.Rules(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := nftables.New().Apply(n.Path(), rs); err != nil {
		t.Fatal(err)
	}
	return dir, n
}

// explain --check reaches the real agent endpoint through the real API
// server's pods/proxy, as an account granted only what docs/permissions.md
// lists, and reports the rules in the pod's real netns; with one deleted it
// exits 3 naming it.
func TestExplainCheckFromCluster(t *testing.T) {
	testenv.NeedRoot(t)
	ip := hostIP(t)
	env := testenv.Start(t)
	ns := env.Namespace(t, "shop")
	agentNS := env.Namespace(t, "mesh-cni")
	env.Node(t, "worker-check")
	publish(t, env, "worker-check", `{"type":"mesh-cni","backend":"nftables"}`)
	linkerdPod(t, env, ns, "web-0", "worker-check")
	ctx := context.Background()
	pod, err := env.Client.CoreV1().Pods(ns).Get(ctx, "web-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node, err := env.Client.CoreV1().Nodes().Get(ctx, "worker-check", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	published, err := check.ParseAgentStatus(node)
	if err != nil || published == nil {
		t.Fatalf("status: %v", err)
	}
	dir, n := meshedNetns(t, pod, published.Entry, "10.244.1.7")

	// The pod-rules container: the real handler, reading the pod and the
	// Node from the API as mesh-cni-agent pod-rules does, on this host's
	// address.
	ictx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	h := podrules.NewHandler(podrules.Handler{Node: "worker-check", NetnsDir: dir,
		Entry: func(ctx context.Context) ([]byte, error) {
			n, err := env.Client.CoreV1().Nodes().Get(ctx, "worker-check", metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			st, err := check.ParseAgentStatus(n)
			if err != nil || st == nil {
				return nil, err
			}
			return st.Entry, nil
		},
		Pod: func(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
			p, err := env.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil, nil
			}
			return p, err
		}})
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = agent.ServeListener(ictx, ln, h) }()
	port := ln.Addr().(*net.TCPAddr).Port

	// The agent's pod, as the DaemonSet makes it (no kubelet runs it here).
	ap := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "mesh-cni-abcde", Labels: map[string]string{"app.kubernetes.io/name": "mesh-cni"}},
		Spec: corev1.PodSpec{NodeName: "worker-check", HostNetwork: true, Containers: []corev1.Container{
			{Name: "agent", Image: "example.com/mesh-cni"},
			{Name: "pod-rules", Image: "example.com/mesh-cni", Ports: []corev1.ContainerPort{{Name: finding.PortName, ContainerPort: int32(port)}}},
		}}}
	created, err := env.Client.CoreV1().Pods(agentNS).Create(ctx, ap, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
	if _, err := env.Client.CoreV1().Pods(agentNS).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The operator: get on pods and nodes (explain), list pods and get
	// pods/proxy in the agent's namespace (--check), nothing else.
	reader := "check-reader"
	if _, err := env.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: reader}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.BindClusterRole(t, ns, reader, []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "nodes"}, Verbs: []string{"get"}}})
	bindRole := func(rules []rbacv1.PolicyRule) func() {
		role, err := env.Client.RbacV1().Roles(agentNS).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{GenerateName: "check-"}, Rules: rules}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := env.Client.RbacV1().RoleBindings(agentNS).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: reader}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return func() {
			_ = env.Client.RbacV1().RoleBindings(agentNS).Delete(ctx, role.Name, metav1.DeleteOptions{})
			_ = env.Client.RbacV1().Roles(agentNS).Delete(ctx, role.Name, metav1.DeleteOptions{})
		}
	}
	kube := []string{"--kubeconfig", env.Kubeconfig, "--as", "system:serviceaccount:" + ns + ":" + reader, "--agent-namespace", agentNS}
	explainCheck := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(append(append([]string{"explain", "-n", ns, "web-0", "--check"}, args...), kube...), &out, &errb)
		return code, out.String(), errb.String()
	}

	// Without get on pods/proxy: refused by the API server, exit 1.
	unbind := bindRole([]rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}}})
	testenv.Eventually(t, "the list grant", func() error {
		if code, _, errs := explainCheck(); code != exitFailed || !strings.Contains(errs, "pods/proxy") || !strings.Contains(errs, "forbidden") {
			return &checkErr{code, errs}
		}
		return nil
	})
	unbind()
	bindRole([]rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
		{APIGroups: []string{""}, Resources: []string{"pods/proxy"}, Verbs: []string{"get"}},
	})

	var code int
	var out, errs string
	testenv.Eventually(t, "explain --check with the grants", func() error {
		if code, out, errs = explainCheck(); code != 0 {
			return &checkErr{code, out + errs}
		}
		return nil
	})
	for _, want := range []string{"decision: redirect (mesh linkerd)", "check: through agent pod " + agentNS + "/mesh-cni-abcde", "netns " + filepath.Join(dir, "cni-1234"),
		"read with nftables", "STATE", "present", "redirect to :4140", " 0 missing, 0 extra\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain --check lacks %q:\n%s", want, out)
		}
	}

	// -o json: the findings, typed.
	code, out, errs = explainCheck("-o", "json")
	var got struct {
		Kind     string
		Decision string
		Check    finding.Report
	}
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil {
		t.Fatalf("-o json: exit %d, %v:\n%s%s", code, err, out, errs)
	}
	if got.Kind != "Explanation" || got.Check.Backend != "nftables" || got.Check.Pod != ns+"/web-0" ||
		finding.Count(got.Check.Findings, finding.Present) == 0 || finding.Count(got.Check.Findings, finding.Missing) != 0 {
		t.Errorf("-o json: %+v", got)
	}

	// One rule deleted behind the plugin's back: exit 3, and it is named.
	deleteFirstRule(t, n, rules.ChainOutput)
	code, out, errs = explainCheck()
	if code != exitRulesDiffer || !strings.Contains(out, "missing") || strings.Contains(out, " 0 missing") {
		t.Errorf("after deleting a rule: exit %d, want %d:\n%s%s", code, exitRulesDiffer, out, errs)
	}

	// Usage: --check needs a live pod and the node's entry.
	var o, e bytes.Buffer
	if c := run([]string{"explain", "--check", "--profile", "linkerd"}, &o, &e); c != exitUsage || !strings.Contains(e.String(), "--check needs a live pod") {
		t.Errorf("--check without a pod: exit %d: %s", c, e.String())
	}
	e.Reset()
	if c := run([]string{"explain", ns + "/web-0", "--check", "--profile", "linkerd"}, &o, &e); c != exitUsage || !strings.Contains(e.String(), "do not apply") {
		t.Errorf("--check --profile: exit %d: %s", c, e.String())
	}
}

type checkErr struct {
	code int
	out  string
}

func (e *checkErr) Error() string { return "exit " + strconv.Itoa(e.code) + ":\n" + e.out }

// deleteFirstRule removes the first rule of one of our chains in n.
func deleteFirstRule(t *testing.T, n ns.NetNS, chain string) {
	t.Helper()
	testenv.DeleteNftRule(t, n, rules.NftTable, chain, 0)
}
