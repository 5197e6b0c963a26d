//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

const startupTaint = "mesh-cni.io/not-ready"

// Pods that reach a node while its agent is not ready must still end up
// meshed: the startup taint keeps them off until the agent is ready, and the
// plugin refuses to set up meshed pods before that.
var _ = Describe("agent not ready yet", Serial, Ordered, Label("race"), func() {
	It("keeps pods off a tainted node until the agent is ready, and they start meshed", func(ctx SpecContext) {
		if env.Install != "helm" {
			Skip("the race spec turns the startup taint on with Helm; this run installed with " + env.Install)
		}
		a, b := twoNodes(ctx)
		helmInstall(currentAgentImage(ctx), "--set", "startupTaint.enabled=true")
		waitDaemonSetReady(ctx, client, 3*time.Minute)

		ns := newNamespace(ctx, "e2e-race")
		peer := startPods(ctx, ns, plainPod("peer", b))["peer"]

		By("tainting " + a + " as a new node would be, and restarting its agent")
		setTaint(ctx, a, true)
		DeferCleanup(func(ctx SpecContext) { setTaint(ctx, a, false) })
		agents, err := client.CoreV1().Pods(meshNamespace).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + a})
		Expect(err).NotTo(HaveOccurred())
		Expect(agents.Items).NotTo(BeEmpty())
		for _, p := range agents.Items {
			Expect(client.CoreV1().Pods(meshNamespace).Delete(ctx, p.Name, metav1.DeleteOptions{})).To(Succeed())
		}

		By("creating meshed pods for that node at once")
		var names []string
		for i := 0; i < 4; i++ {
			p := meshedPod(fmt.Sprintf("early-%d", i), a, linkerd, nil)
			_, err := client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred())
			names = append(names, p.Name)
		}

		By("waiting for the agent to clear the taint")
		Eventually(ctx, func() bool { return hasTaint(ctx, a) }).
			WithTimeout(testenv.Scale(3 * time.Minute)).WithPolling(time.Second).Should(BeFalse())
		for _, n := range names {
			waitRunning(ctx, ns, n)
			Expect(meshedOutbound(ns, n, peer.Status.PodIP)).To(BeTrue(), "pod %s started unmeshed", n)
		}
	})
})

func currentAgentImage(ctx context.Context) string {
	ds, err := client.AppsV1().DaemonSets(meshNamespace).Get(ctx, daemonSet, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	return ds.Spec.Template.Spec.Containers[0].Image
}

func hasTaint(ctx context.Context, node string) bool {
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	for _, t := range n.Spec.Taints {
		if t.Key == startupTaint {
			return true
		}
	}
	return false
}

func setTaint(ctx context.Context, node string, on bool) {
	Eventually(ctx, func() error {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var taints []corev1.Taint
		for _, t := range n.Spec.Taints {
			if t.Key != startupTaint {
				taints = append(taints, t)
			}
		}
		if on {
			taints = append(taints, corev1.Taint{Key: startupTaint, Effect: corev1.TaintEffectNoSchedule})
		}
		n.Spec.Taints = taints
		_, err = client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	}).WithTimeout(testenv.Scale(30 * time.Second)).WithPolling(time.Second).Should(Succeed())
}
