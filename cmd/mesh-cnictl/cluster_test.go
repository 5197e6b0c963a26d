package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/mesh-cni/mesh-cni/internal/agent"
	"github.com/mesh-cni/mesh-cni/internal/config"
	"github.com/mesh-cni/mesh-cni/internal/node"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// publish puts what the agent publishes on node: its status with entry,
// built from settings as the agent builds it (config.Load).
func publish(t *testing.T, env *testenv.Env, nodeName, settings string) {
	t.Helper()
	entry, err := config.Load([]byte(settings), config.HostPaths{Kubeconfig: node.DefaultKubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	st := agent.Status{Marker: node.Marker{Version: "v9.9.9", Backend: "nftables", Conf: "/etc/cni/net.d/10-kindnet.conflist"},
		Ready: true, Entry: compact(t, entry)}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{agent.StatusAnnotation: string(b)}}})
	if _, err := env.Client.CoreV1().Nodes().Patch(context.Background(), nodeName, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func compact(t *testing.T, b []byte) json.RawMessage {
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// linkerdPod creates the explain testdata's Linkerd pod in ns on node,
// with an IPv4-only status.
func linkerdPod(t *testing.T, env *testenv.Env, ns, name, nodeName string) {
	t.Helper()
	b, err := os.ReadFile("../../internal/ctl/explain/testdata/linkerd-pod.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(b, &pod); err != nil {
		t.Fatal(err)
	}
	pod.Namespace, pod.Name, pod.Spec.NodeName = ns, name, nodeName
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			cs[i].Image = "example.com/" + cs[i].Name
		}
	}
	ctx := context.Background()
	created, err := env.Client.CoreV1().Pods(ns).Create(ctx, &pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.7", PodIPs: []corev1.PodIP{{IP: "10.244.1.7"}}}
	if _, err := env.Client.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// explain -n NS POD reads the live pod and the chain entry the agent on its
// node published, with no more than get on pods and nodes (--as a reader).
func TestExplainFromCluster(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t, "shop")
	env.Node(t, "worker-plain")
	env.Node(t, "worker-excluding")
	env.Node(t, "worker-new")
	publish(t, env, "worker-plain", `{"type":"mesh-cni"}`)
	publish(t, env, "worker-excluding", `{"type":"mesh-cni","excludeNamespaces":["`+ns+`"]}`)
	linkerdPod(t, env, ns, "web-0", "worker-plain")
	linkerdPod(t, env, ns, "web-1", "worker-excluding")
	linkerdPod(t, env, ns, "web-2", "worker-new")
	linkerdPod(t, env, ns, "web-3", "")

	reader := "explain-reader"
	if _, err := env.Client.CoreV1().ServiceAccounts(ns).Create(context.Background(),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: reader}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.BindClusterRole(t, ns, reader, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods", "nodes"}, Verbs: []string{"get"}},
	})
	kube := []string{"--kubeconfig", env.Kubeconfig, "--as", "system:serviceaccount:" + ns + ":" + reader}
	explainCmd := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(append(append([]string{"explain"}, args...), kube...), &out, &errb)
		return code, out.String(), errb.String()
	}

	code, out, errs := explainCmd("-n", ns, "web-0", "--format", "nft")
	if code != 0 {
		t.Fatalf("explain -n %s web-0: exit %d: %s", ns, code, errs)
	}
	for _, want := range []string{"chain entry: node worker-plain (" + agent.StatusAnnotation + ")\npod: " + ns + "/web-0\n", "decision: redirect (mesh linkerd)", "families:          ipv4\n",
		"proxy uid/gid:     2103/none", "except ports 3306", "redirect to :4140", "# nft -f -"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain -n %s web-0 lacks %q:\n%s", ns, want, out)
		}
	}
	if strings.Contains(out, "iptables-restore") {
		t.Errorf("--format nft printed iptables:\n%s", out)
	}

	// The entry of web-1's node excludes the namespace: the node's entry
	// decides, not the built-in profiles.
	code, out, errs = explainCmd(ns + "/web-1")
	if code != 0 || !strings.Contains(out, "decision: skip (excluded)") {
		t.Errorf("explain %s/web-1: exit %d, want skip (excluded):\n%s%s", ns, code, out, errs)
	}
	// -o wide names and shows the entry.
	code, out, _ = explainCmd(ns+"/web-1", "-o", "wide")
	if code != 0 || !strings.Contains(out, "chain entry: node worker-excluding ("+agent.StatusAnnotation+")\n") || !strings.Contains(out, `"excludeNamespaces":["`+ns+`"]`) {
		t.Errorf("explain -o wide: exit %d:\n%s", code, out)
	}
	// --profile overrides the node's entry.
	code, out, _ = explainCmd(ns+"/web-1", "--profile", "linkerd")
	if code != 0 || !strings.Contains(out, "decision: redirect (mesh linkerd)") {
		t.Errorf("explain --profile linkerd: exit %d:\n%s", code, out)
	}

	// -o json and -o yaml: the same decision, typed.
	for _, format := range []string{"json", "yaml"} {
		code, out, errs = explainCmd("-n", ns, "web-0", "-o", format)
		var got struct {
			Kind, APIVersion, Pod, Node, Entry, Decision, Mesh string
			Families                                           []string
			Nft                                                string
			Iptables                                           map[string]string
		}
		var err error
		if format == "json" {
			err = json.Unmarshal([]byte(out), &got)
		} else {
			err = yaml.Unmarshal([]byte(out), &got)
		}
		if code != 0 || err != nil {
			t.Fatalf("-o %s: exit %d, %v:\n%s%s", format, code, err, out, errs)
		}
		if got.Kind != "Explanation" || got.APIVersion != apiVersion || got.Pod != ns+"/web-0" || got.Node != "worker-plain" ||
			got.Decision != "redirect" || got.Mesh != "linkerd" || strings.Join(got.Families, ",") != "ipv4" ||
			!strings.Contains(got.Nft, "redirect to :4140") || !strings.Contains(got.Iptables["iptables"], "--to-ports 4140") ||
			got.Entry != "node worker-plain ("+agent.StatusAnnotation+")" {
			t.Errorf("-o %s: %+v", format, got)
		}
	}

	// What the reader is told when there is nothing to read.
	for _, c := range []struct{ pod, want string }{
		{"web-2", "node worker-new has no " + agent.StatusAnnotation + " annotation"},
		{"web-3", "is not scheduled yet"},
		{"nope", `pods "nope" not found`},
	} {
		code, out, errs = explainCmd("-n", ns, c.pod)
		if code != exitFailed || !strings.Contains(errs, c.want) {
			t.Errorf("explain %s: exit %d, want %d with %q:\n%s%s", c.pod, code, exitFailed, c.want, out, errs)
		}
	}
	// A reader without get on nodes is told so.
	var eout, eerr bytes.Buffer
	code = run([]string{"explain", "-n", ns, "web-0", "--kubeconfig", env.Kubeconfig, "--as", "system:serviceaccount:" + ns + ":default"}, &eout, &eerr)
	if errs = eerr.String(); code != exitFailed || !strings.Contains(errs, "forbidden") {
		t.Errorf("explain as an account without rights: exit %d: %s", code, errs)
	}
}

// version lists the agents' versions from their Node status.
func TestVersionWithServer(t *testing.T) {
	env := testenv.Start(t)
	env.Node(t, "v-a")
	env.Node(t, "v-b")
	publish(t, env, "v-a", `{"type":"mesh-cni"}`)
	var out, errb bytes.Buffer
	if code := run([]string{"version", "--kubeconfig", env.Kubeconfig}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "agent v9.9.9 on 1 node(s): v-a\n") || !strings.Contains(out.String(), "v-b") {
		t.Errorf("version:\n%s", out.String())
	}
	out.Reset()
	if code := run([]string{"version", "--kubeconfig", env.Kubeconfig, "-o", "json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var v struct {
		Kind   string
		Client buildInfo
		Agents []agentOnNode
	}
	if err := json.Unmarshal(out.Bytes(), &v); err != nil || v.Kind != "Version" || v.Client.Version == "" {
		t.Fatalf("-o json (%v):\n%s", err, out.String())
	}
	found := false
	for _, a := range v.Agents {
		if a.Node == "v-a" {
			found = a.Version == "v9.9.9" && a.Ready && a.Backend == "nftables"
		}
	}
	if !found {
		t.Errorf("agents %+v", v.Agents)
	}
	// No cluster: the client's line, then the error, exit 1.
	out.Reset()
	errb.Reset()
	code := run([]string{"version", "--kubeconfig", t.TempDir() + "/missing"}, &out, &errb)
	if code != exitFailed || !strings.HasPrefix(out.String(), "mesh-cnictl ") || !strings.Contains(errb.String(), "--client") {
		t.Errorf("version without a cluster: exit %d, %q, %q", code, out.String(), errb.String())
	}
}
