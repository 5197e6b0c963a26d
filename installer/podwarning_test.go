package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mesh-cni/mesh-cni/internal/agent"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// TestPodWarnings: a meshed pod whose ADD fails on a bad annotation gets a
// Warning Event that `kubectl describe pod` shows (matched by the pod's
// UID), whether the runtime passed K8S_POD_UID or the agent had to find it.
// The real agent and plugin run against a real kube-apiserver.
func TestPodWarnings(t *testing.T) {
	r := newNodeRig(t)
	nodeName := "podwarn-" + r.ns
	n := r.node(t, nodeName, `{"type":"mesh-cni","backend":"nftables"}`, true)
	waitFor(t, func() bool { ok, _ := n.readyz(); return ok })
	ctx := context.Background()
	entry := chainedEntry(t, n.primary)

	// As Linkerd's injector annotates a pod (proxy-version marks it injected).
	annotations := map[string]string{
		"linkerd.io/inject":                     "enabled",
		"linkerd.io/proxy-version":              "edge-25.4.4",
		"config.linkerd.io/skip-outbound-ports": "http", // not a port
	}
	for _, tc := range []struct {
		pod     string
		withUID bool
	}{{"runtime-uid", true}, {"agent-uid", false}} {
		t.Run(tc.pod, func(t *testing.T) {
			pod, err := r.env.Client.CoreV1().Pods(r.ns).Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: tc.pod, Annotations: annotations},
				Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{
					{Name: "app", Image: "app"}, {Name: "linkerd-proxy", Image: "proxy"}}},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			netns := testenv.NewNS(t)

			args := [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", r.ns}, {"K8S_POD_NAME", tc.pod}}
			if tc.withUID {
				args = append(args, [2]string{"K8S_POD_UID", string(pod.UID)})
			} else {
				// The agent's informer must hold the pod before it can name its UID.
				waitFor(t, func() bool { return cachedByAgent(n.d("host/var/run/mesh-cni/agent.sock"), r.ns, tc.pod) })
			}
			rt := &libcni.RuntimeConf{ContainerID: tc.pod, NetNS: netns.Path(), IfName: "eth0", Args: args,
				CapabilityArgs: map[string]any{"io.kubernetes.cri.pod-annotations": annotations}}
			c := libcni.NewCNIConfigWithCacheDir([]string{n.d("host/opt/cni/bin")}, n.d("cache"), nil)
			if _, err := c.AddNetworkList(ctx, entry, rt); err == nil || !strings.Contains(err.Error(), "skip-outbound-ports") {
				t.Fatalf("ADD with a bad annotation: %v", err)
			}
			waitFor(t, func() bool {
				evs, err := r.env.Client.CoreV1().Events(r.ns).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
					"involvedObject.kind": "Pod", "involvedObject.name": tc.pod, "involvedObject.uid": string(pod.UID),
					"reason": agent.EventAddFailed}.String()})
				if err != nil {
					return false
				}
				for _, e := range evs.Items {
					if e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "skip-outbound-ports") &&
						e.InvolvedObject.UID == types.UID(pod.UID) {
						return true
					}
				}
				return false
			})
		})
	}
}

// chainedEntry is a one-plugin list holding only our entry as the agent
// chained it into primary (the stand-in primary plugins print no result).
func chainedEntry(t *testing.T, primary string) *libcni.NetworkConfigList {
	t.Helper()
	b, err := os.ReadFile(primary)
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		CNIVersion string            `json:"cniVersion"`
		Name       string            `json:"name"`
		Plugins    []json.RawMessage `json:"plugins"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Plugins {
		var typ struct{ Type string }
		if json.Unmarshal(p, &typ) == nil && typ.Type == "mesh-cni" {
			one, _ := json.Marshal(map[string]any{"cniVersion": list.CNIVersion, "name": list.Name, "plugins": []json.RawMessage{p}})
			l, err := libcni.ConfListFromBytes(one)
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
	}
	t.Fatalf("no mesh-cni entry in %s", b)
	return nil
}

// cachedByAgent asks the agent's pod cache (the socket the plugin uses)
// whether it holds the pod.
func cachedByAgent(socket, namespace, name string) bool {
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}}
	resp, err := c.Get("http://agent/v1/pods/" + namespace + "/" + name)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
