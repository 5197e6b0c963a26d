//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// holdLabel is a node label no node has: a DaemonSet selecting it runs on
// no node, while the DaemonSet itself (and so our chain entry) stays.
const holdLabel = "mesh-cni.io/e2e-hold"

// A node that restarts loses the readiness marker (tmpfs) while our entry
// stays in the primary's list. With a 1.1.0 list the runtime asks every
// plugin for STATUS, and ours answers "not ready" until the agent is back:
// the kubelet reports the node's network not ready instead of starting pods
// that would come up unredirected.
var _ = Describe("CNI STATUS", Serial, Ordered, Label("status"), func() {
	It("makes the runtime report the node's network not ready while the marker is missing, and ready after", func(ctx SpecContext) {
		node := schedulableNodes(ctx)[0]
		n := nodeByName(node)
		path, conf := primaryConf(n)
		version, marker := statusInputs(conf)
		if version != "1.1.0" {
			Skip("the primary list " + path + " is cniVersion " + version + ": the runtime sends STATUS to 1.1.0 lists only (kind-configs/status.yaml)")
		}
		Expect(marker).NotTo(BeEmpty(), "no mesh-cni entry with a readyMarker in %s: %s", path, conf)

		By("keeping the agent off every node, the DaemonSet still there")
		holdAgents(ctx, true)
		DeferCleanup(func(ctx SpecContext) { holdAgents(ctx, false) })
		Eventually(ctx, func() []string { return agentPods(ctx, node) }).
			WithTimeout(testenv.Scale(2 * time.Minute)).WithPolling(time.Second).Should(BeEmpty())
		_, conf = primaryConf(n)
		Expect(pluginTypes(conf)).To(ContainElement("mesh-cni"), "the agent left the node uninstalled: %s", conf)

		By("removing the readiness marker " + marker + " on " + node + ", as a reboot does")
		out, err := nodeExec(n, "rm", "-f", marker)
		Expect(err).NotTo(HaveOccurred(), out)
		Eventually(ctx, func() string { return readyCondition(ctx, node) }).
			WithTimeout(testenv.Scale(2 * time.Minute)).WithPolling(time.Second).
			Should(And(HavePrefix("False:"), ContainSubstring("mesh-cni node agent is not ready")))
		GinkgoWriter.Printf("node %s: %s\n", node, readyCondition(ctx, node))

		By("letting the agent back: it writes the marker and the node is ready again")
		holdAgents(ctx, false)
		Eventually(ctx, func() string { return readyCondition(ctx, node) }).
			WithTimeout(testenv.Scale(3 * time.Minute)).WithPolling(time.Second).Should(HavePrefix("True:"))
		out, err = nodeExec(n, "cat", marker)
		Expect(err).NotTo(HaveOccurred(), "no marker after the agent came back: %s", out)
		waitDaemonSetReady(ctx, client, testenv.Scale(3*time.Minute))
	})
})

// statusInputs reads the list's cniVersion and our entry's readyMarker.
func statusInputs(conf string) (version, marker string) {
	var c struct {
		CNIVersion string `json:"cniVersion"`
		Plugins    []struct {
			Type        string `json:"type"`
			ReadyMarker string `json:"readyMarker"`
		} `json:"plugins"`
	}
	Expect(json.Unmarshal([]byte(conf), &c)).To(Succeed(), "conflist: %s", conf)
	for _, p := range c.Plugins {
		if p.Type == "mesh-cni" {
			marker = p.ReadyMarker
		}
	}
	return c.CNIVersion, marker
}

// holdAgents adds or removes holdLabel in the agent DaemonSet's node selector.
func holdAgents(ctx context.Context, on bool) {
	pt, patch := types.StrategicMergePatchType, `{"spec":{"template":{"spec":{"nodeSelector":{"`+holdLabel+`":"true"}}}}}`
	if !on {
		patch = `{"spec":{"template":{"spec":{"nodeSelector":{"` + holdLabel + `":null}}}}}`
	}
	_, err := client.AppsV1().DaemonSets(meshNamespace).Patch(ctx, daemonSet, pt, []byte(patch), metav1.PatchOptions{})
	Expect(err).NotTo(HaveOccurred())
}

// agentPods names the agent pods on a node.
func agentPods(ctx context.Context, node string) []string {
	ds, err := client.AppsV1().DaemonSets(meshNamespace).Get(ctx, daemonSet, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	Expect(err).NotTo(HaveOccurred())
	pods, err := client.CoreV1().Pods(meshNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: sel.String(), FieldSelector: "spec.nodeName=" + node})
	Expect(err).NotTo(HaveOccurred())
	var names []string
	for _, p := range pods.Items {
		names = append(names, p.Name)
	}
	return names
}

// readyCondition is the node's Ready condition as "<status>: <message>".
func readyCondition(ctx context.Context, node string) string {
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return string(c.Status) + ": " + strings.TrimSpace(c.Message)
		}
	}
	return "Unknown: no Ready condition"
}
