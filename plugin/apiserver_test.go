package main

import (
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mesh-cni/mesh-cni/internal/agent/kubeconfig"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// The last resort: one GET of the pod through the kubeconfig the agent
// writes, against a real kube-apiserver, with a service-account token
// allowed only to get pods.
func TestLookupKubeconfigRealAPIServer(t *testing.T) {
	kenv := testenv.Start(t)
	ns := kenv.Namespace(t, "shop")
	kenv.BindClusterRole(t, ns, "mesh-cni", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}})
	always := corev1.ContainerRestartPolicyAlways
	uid := int64(2102)
	created, err := kenv.Client.CoreV1().Pods(ns).Create(ctx(t), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Annotations: map[string]string{"linkerd.io/proxy-version": "edge-26.1.1"}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "linkerd-proxy", Image: "proxy", RestartPolicy: &always,
				SecurityContext: &corev1.SecurityContext{RunAsUser: &uid}}},
			Containers: []corev1.Container{{Name: "web", Image: "web"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token, err := kenv.Token(ctx(t), ns, "mesh-cni", 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	env := newNodeEnv(t) // agent down: the API is the only source
	writeKubeconfig(t, env, kenv.Host, token, kenv.CAData)
	c := newChain(t, env, chainOpts{version: "1.0.0", subnet: 42})

	meshed := newPod(t, ns, "web-1", map[string]string{"linkerd.io/proxy-version": "edge-26.1.1"})
	meshed.setUID(string(created.UID))
	c.mustAdd(meshed)
	if dump := ruleDump(t, meshed.netns.Path())["nft list ruleset"]; !strings.Contains(dump, "4143") {
		t.Errorf("pod judged through the API has no linkerd rules:\n%s", dump)
	}
	// The runtime names another pod of that name than the API holds (it
	// was deleted and recreated since): its annotations say nothing of
	// the runtime's pod, so it cannot be judged yet.
	other := newPod(t, ns, "web-1", map[string]string{"linkerd.io/proxy-version": "edge-26.1.1"})
	other.setUID("0b6f0d6e-0000-4000-8000-000000000001")
	_, err = c.add(other)
	var e *types.Error
	if !errors.As(err, &e) || e.Code != types.ErrTryAgainLater ||
		!strings.Contains(e.Details, "has another UID: pod "+ns+"/web-1 is "+string(created.UID)+", the runtime's is 0b6f0d6e-") {
		t.Errorf("pod of another UID: got %v, want code 11 naming both UIDs", err)
	}
	if got := ours(ruleDump(t, other.netns.Path())); len(got) != 0 {
		t.Errorf("pod of another UID got rules via %v", got)
	}
	// A pod the API does not have cannot be judged.
	_, err = c.add(newPod(t, ns, "ghost", nil))
	if !errors.As(err, &e) || e.Code != types.ErrTryAgainLater || !strings.Contains(e.Details, "pod not found") {
		t.Errorf("unknown pod: got %v, want code 11 with pod not found", err)
	}
}

// writeKubeconfig writes the plugin's kubeconfig with the agent's writer.
func writeKubeconfig(t *testing.T, env *nodeEnv, server, token string, ca []byte) {
	t.Helper()
	u, err := url.Parse(server)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tok, caPath := filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(tok, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caPath, ca, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := kubeconfig.Write(env.kubeconfig, kubeconfig.Options{Host: u.Hostname(), Port: u.Port(), TokenPath: tok, CAPath: caPath}); err != nil {
		t.Fatal(err)
	}
}
