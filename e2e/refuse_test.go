//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/mesh-cni/mesh-cni/internal/agent"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// Two mistakes a user can make that must never break a node: a plugin
// setting the plugin would reject, and a bin dir that is not the runtime's.
// The agent refuses either, reports it on the Node, and keeps the entry it
// chained before, so pods keep starting (meshed ones meshed) and DEL works.
var _ = Describe("refused settings", Serial, Ordered, Label("refuse"), func() {
	It("keep the last good entry when plugin.json has a bad value", func(ctx SpecContext) {
		cm := agentConfigMap(ctx)
		before := cm.Data["plugin.json"]
		var entry map[string]any
		Expect(json.Unmarshal([]byte(before), &entry)).To(Succeed(), "plugin.json: %s", before)
		meshes, _ := entry["meshes"].(map[string]any)
		if meshes == nil {
			meshes = map[string]any{}
		}
		meshes["istio"] = map[string]any{"proxyUID": -5}
		entry["meshes"] = meshes
		bad, err := json.Marshal(entry)
		Expect(err).NotTo(HaveOccurred())

		refused(ctx, "proxyUID", func(ctx context.Context) string {
			setPluginJSON(ctx, string(bad))
			node := schedulableNodes(ctx)[0]
			for _, p := range agentPods(ctx, node) {
				Expect(client.CoreV1().Pods(meshNamespace).Delete(ctx, p, metav1.DeleteOptions{})).To(Succeed())
			}
			return node
		}, func(ctx context.Context) {
			setPluginJSON(ctx, before)
			for _, p := range agentPods(ctx, schedulableNodes(ctx)[0]) {
				Expect(client.CoreV1().Pods(meshNamespace).Delete(ctx, p, metav1.DeleteOptions{})).To(Succeed())
			}
		})
	})

	It("keep the last good entry when the bin dir is not the runtime's", func(ctx SpecContext) {
		const wrong = "/opt/cni/wrong-bin"
		var orig string
		refused(ctx, "cni.binDir", func(ctx context.Context) string {
			gen := updateAgents(ctx, func(ds *appsv1.DaemonSet) {
				for i, v := range ds.Spec.Template.Spec.Volumes {
					if v.Name == "cni-bin-dir" && v.HostPath != nil {
						orig = v.HostPath.Path
						ds.Spec.Template.Spec.Volumes[i].HostPath.Path = wrong
					}
				}
			})
			Expect(orig).NotTo(BeEmpty(), "no cni-bin-dir hostPath volume in the DaemonSet")
			// The rollout stops at the first node whose new agent is not ready.
			var node string
			Eventually(ctx, func() string {
				node = agentNodeAtGeneration(ctx, gen)
				return node
			}).WithTimeout(testenv.Scale(3 * time.Minute)).WithPolling(time.Second).ShouldNot(BeEmpty())
			return node
		}, func(ctx context.Context) {
			updateAgents(ctx, func(ds *appsv1.DaemonSet) {
				for i, v := range ds.Spec.Template.Spec.Volumes {
					if v.Name == "cni-bin-dir" && v.HostPath != nil {
						ds.Spec.Template.Spec.Volumes[i].HostPath.Path = orig
					}
				}
			})
		})
		for _, n := range schedulableNodes(ctx) {
			_, _ = nodeExec(nodeByName(n), "rm", "-rf", wrong)
		}
	})
})

// refused breaks the agent's settings with breakIt (which returns the node
// whose agent runs them), checks that the node stays usable and that the
// refusal names why, then restores them with fix.
func refused(ctx context.Context, why string, breakIt func(context.Context) string, fix func(context.Context)) {
	a, b := twoNodes(ctx)
	ns := newNamespace(ctx, "e2e-refuse")
	peer := startPods(ctx, ns, plainPod("peer", b))["peer"]
	old := startPods(ctx, ns, meshedPod("old", a, linkerd, nil))["old"]
	// Every node the agent runs on: the rollout that breaks the settings
	// may stop first on the control plane, which takes no ordinary pods.
	conf := map[string]string{}
	all, err := provider().ListNodes(env.Cluster)
	Expect(err).NotTo(HaveOccurred())
	for _, n := range all {
		_, conf[n.String()] = primaryConf(n)
	}

	By("breaking the agent's settings (" + why + ")")
	node := breakIt(ctx)
	DeferCleanup(func(ctx SpecContext) {
		fix(ctx)
		waitDaemonSetReady(ctx, client, testenv.Scale(3*time.Minute))
		Eventually(ctx, func() string { return agentStatus(ctx, node) }).
			WithTimeout(testenv.Scale(2 * time.Minute)).WithPolling(time.Second).Should(HavePrefix("ready"))
		Eventually(ctx, func() []string { return nodeEventReasons(ctx, node) }).
			WithTimeout(testenv.Scale(30*time.Second)).WithPolling(time.Second).
			Should(ContainElement(agent.ReasonReady), "`kubectl describe node %s` shows no %s Event", node, agent.ReasonReady)
	})

	By("the agent on " + node + " is not ready and says why, on the Node and in an Event")
	Eventually(ctx, func() string { return agentStatus(ctx, node) }).
		WithTimeout(testenv.Scale(3 * time.Minute)).WithPolling(time.Second).
		Should(And(HavePrefix("not ready:"), ContainSubstring(why)))
	Eventually(ctx, func() []string { return nodeWarnings(ctx, node, agent.ReasonRefused) }).
		WithTimeout(testenv.Scale(time.Minute)).WithPolling(time.Second).
		Should(ContainElement(ContainSubstring(why)))
	GinkgoWriter.Printf("node %s: %s\n", node, agentStatus(ctx, node))

	By("the chain keeps the entry it had")
	_, now := primaryConf(nodeByName(node))
	Expect(now).To(Equal(conf[node]), "the primary's conflist on %s changed", node)

	By("pods still start on " + node + ": kube-system, and meshed ones meshed by the kept entry")
	sys := onAnyNode(plainPod(fmt.Sprintf("e2e-refuse-%d", time.Now().UnixNano()%100000), node))
	sys.Spec.Containers[0].SecurityContext = restricted(appUID)
	startPods(ctx, "kube-system", sys)
	DeferCleanup(func(ctx SpecContext) {
		_ = client.CoreV1().Pods("kube-system").Delete(ctx, sys.Name, metav1.DeleteOptions{})
	})
	fresh := startPods(ctx, ns, onAnyNode(meshedPod("fresh", node, linkerd, nil)))["fresh"]
	Expect(meshedOutbound(ns, fresh.Name, peer.Status.PodIP)).To(BeTrue(), "a pod started while the settings were refused is unmeshed")

	By("DEL of a pod that ran before succeeds")
	Expect(client.CoreV1().Pods(ns).Delete(ctx, old.Name, metav1.DeleteOptions{})).To(Succeed())
	Eventually(ctx, func() bool {
		_, err := client.CoreV1().Pods(ns).Get(ctx, old.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}).WithTimeout(testenv.Scale(2*time.Minute)).WithPolling(time.Second).Should(BeTrue(), "pod %s stays Terminating", old.Name)
}

// agentConfigMap is the ConfigMap the agent DaemonSet mounts as "config".
func agentConfigMap(ctx context.Context) *corev1.ConfigMap {
	ds, err := client.AppsV1().DaemonSets(meshNamespace).Get(ctx, daemonSet, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == "config" && v.ConfigMap != nil {
			cm, err := client.CoreV1().ConfigMaps(meshNamespace).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred())
			return cm
		}
	}
	Fail("the agent DaemonSet mounts no ConfigMap as volume config")
	return nil
}

func setPluginJSON(ctx context.Context, data string) {
	Eventually(ctx, func() error {
		cm := agentConfigMap(ctx)
		cm.Data["plugin.json"] = data
		_, err := client.CoreV1().ConfigMaps(meshNamespace).Update(ctx, cm, metav1.UpdateOptions{})
		return err
	}).WithTimeout(testenv.Scale(30 * time.Second)).Should(Succeed())
}

// updateAgents changes the DaemonSet's template and returns its new generation.
func updateAgents(ctx context.Context, change func(*appsv1.DaemonSet)) int64 {
	var gen int64
	Eventually(ctx, func() error {
		ds, err := client.AppsV1().DaemonSets(meshNamespace).Get(ctx, daemonSet, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(ds)
		ds, err = client.AppsV1().DaemonSets(meshNamespace).Update(ctx, ds, metav1.UpdateOptions{})
		if err == nil {
			gen = ds.Generation
		}
		return err
	}).WithTimeout(testenv.Scale(30 * time.Second)).Should(Succeed())
	return gen
}

// agentNodeAtGeneration names a node whose agent pod runs the template of
// generation gen ("" if none yet).
func agentNodeAtGeneration(ctx context.Context, gen int64) string {
	pods, err := client.CoreV1().Pods(meshNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: fmt.Sprintf("pod-template-generation=%d", gen)})
	Expect(err).NotTo(HaveOccurred())
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning {
			return p.Spec.NodeName
		}
	}
	return ""
}

// agentStatus is the agent's Node annotation as "ready" or "not ready: <reason>".
func agentStatus(ctx context.Context, node string) string {
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	raw, ok := n.Annotations[agent.StatusAnnotation]
	if !ok {
		return "no status"
	}
	var st agent.Status
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		return "unreadable status: " + raw
	}
	if st.Ready {
		return "ready"
	}
	return "not ready: " + st.Reason
}

// nodeWarnings lists the messages of the node's Warning Events with reason.
func nodeWarnings(ctx context.Context, node, reason string) []string {
	evs, err := client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
		"involvedObject.kind": "Node", "involvedObject.name": node, "reason": reason}.String()})
	Expect(err).NotTo(HaveOccurred())
	var msgs []string
	for _, e := range evs.Items {
		if e.Type == corev1.EventTypeWarning {
			msgs = append(msgs, strings.TrimSpace(e.Message))
		}
	}
	return msgs
}

// nodeEventReasons lists the reasons of the agent's events.k8s.io/v1
// Events regarding the node (in "default", as cluster-scoped objects'
// Events are), which `kubectl describe node` shows.
func nodeEventReasons(ctx context.Context, node string) []string {
	evs, err := client.EventsV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
		"regarding.kind": "Node", "regarding.name": node}.String()})
	Expect(err).NotTo(HaveOccurred())
	var reasons []string
	for _, e := range evs.Items {
		reasons = append(reasons, e.Reason)
	}
	return reasons
}

// onAnyNode lets a pod pinned to a node run there even when it is a
// control-plane node (its NoSchedule taint), as the agent does.
func onAnyNode(p *corev1.Pod) *corev1.Pod {
	p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{
		Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	return p
}
