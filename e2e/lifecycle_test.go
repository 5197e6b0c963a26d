//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/kind/pkg/cluster/nodes"

	"github.com/mesh-cni/mesh-cni/internal/agent"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

const confDir = "/etc/cni/net.d"

// nodeByName finds the kind node container of a Kubernetes node.
func nodeByName(name string) nodes.Node {
	all, err := provider().ListNodes(env.Cluster)
	Expect(err).NotTo(HaveOccurred())
	for _, n := range all {
		if n.String() == name {
			return n
		}
	}
	Fail("no kind node " + name)
	return nil
}

func nodeExec(n nodes.Node, args ...string) (string, error) {
	var out strings.Builder
	err := n.Command(args[0], args[1:]...).SetStdout(&out).SetStderr(&out).Run()
	return out.String(), err
}

// primaryConf returns the path and content of the conflist the runtime uses
// (the lexically first *.conflist / *.conf in the conf dir).
func primaryConf(n nodes.Node) (string, string) {
	out, err := nodeExec(n, "sh", "-c", "ls "+confDir+"/*.conflist "+confDir+"/*.conf 2>/dev/null | sort | head -n1")
	Expect(err).NotTo(HaveOccurred(), out)
	path := strings.TrimSpace(out)
	Expect(path).NotTo(BeEmpty(), "no CNI config on %s", n)
	body, err := nodeExec(n, "cat", path)
	Expect(err).NotTo(HaveOccurred(), body)
	return path, body
}

// pluginTypes lists the "type" of every plugin in a conflist.
func pluginTypes(conf string) []string {
	var c struct {
		Plugins []struct {
			Type string `json:"type"`
		} `json:"plugins"`
	}
	Expect(json.Unmarshal([]byte(conf), &c)).To(Succeed(), "conflist: %s", conf)
	var t []string
	for _, p := range c.Plugins {
		t = append(t, p.Type)
	}
	return t
}

// meshedOutbound reports whether a pod's app traffic reaches its proxy.
func meshedOutbound(ns, pod, peerIP string) bool {
	r := mustConnect(ns, pod, "app", peerIP, 8080)
	return r.Name == "proxy" && r.Orig == hostPort(peerIP, 8080)
}

var _ = Describe("primary CNI rewrites its conflist", Serial, Ordered, Label("rewrite"), func() {
	It("is re-chained, and new pods are meshed", func(ctx SpecContext) {
		a, b := twoNodes(ctx)
		node := nodeByName(a)
		path, before := primaryConf(node)
		Expect(pluginTypes(before)).To(ContainElement("mesh-cni"), "%s on %s", path, a)

		By("restarting the primary's pod on " + a + ": it writes its conflist afresh at start")
		pns, apps := primaryPods()
		pods, err := client.CoreV1().Pods(pns).List(ctx, metav1.ListOptions{
			FieldSelector: "spec.nodeName=" + a,
		})
		Expect(err).NotTo(HaveOccurred())
		restarted := 0
		oldPods := map[types.UID]bool{}
		for _, p := range pods.Items {
			if isPrimaryPod(&p, apps) {
				oldPods[p.UID] = true
				Expect(client.CoreV1().Pods(pns).Delete(ctx, p.Name, metav1.DeleteOptions{})).To(Succeed())
				restarted++
			}
		}
		Expect(restarted).To(Equal(1), "the primary CNI's pod on %s", a)

		// Re-chained means: the new primary pod has written its fresh
		// conflist and the file holds our entry again. The old file, still
		// chained, must not count.
		Eventually(ctx, func(g Gomega) {
			pods, err := client.CoreV1().Pods(pns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + a})
			g.Expect(err).NotTo(HaveOccurred())
			wrote := false
			for i := range pods.Items {
				p := &pods.Items[i]
				if isPrimaryPod(p, apps) && !oldPods[p.UID] {
					wrote = wrote || primaryHasWritten(ctx, p, path)
				}
			}
			g.Expect(wrote).To(BeTrue(), "the new primary pod on %s has not written %s yet", a, path)
			_, c := primaryConf(node)
			g.Expect(pluginTypes(c)).To(ContainElement("mesh-cni"))
		}).WithTimeout(testenv.Scale(90 * time.Second)).WithPolling(500 * time.Millisecond).Should(Succeed())
		Eventually(ctx, func() []string { return nodeEventReasons(ctx, a) }).
			WithTimeout(testenv.Scale(30*time.Second)).WithPolling(time.Second).
			Should(ContainElement(agent.ReasonRechained), "no %s Event regarding Node %s", agent.ReasonRechained, a)

		ns := newNamespace(ctx, "e2e-rewrite")
		got := startPods(ctx, ns, plainPod("peer", b), meshedPod("client", a, linkerd, nil))
		Expect(meshedOutbound(ns, "client", got["peer"].Status.PodIP)).To(BeTrue())
	})
})

var _ = Describe("helm upgrade", Serial, Ordered, Label("upgrade"), func() {
	It("never lets a pod start unmeshed while the agent rolls", func(ctx SpecContext) {
		if env.Install != "helm" {
			Skip("the upgrade spec drives Helm; this run installed with " + env.Install)
		}
		if env.Release != nil && os.Getenv("E2E_PREVIOUS_RELEASE") != "" {
			Skip("the versions spec rolls the agents between two releases under the same load, and more")
		}
		a, b := twoNodes(ctx)
		ns := newNamespace(ctx, "e2e-upgrade")
		peer := startPods(ctx, ns, plainPod("peer", b))["peer"]

		ds, err := client.AppsV1().DaemonSets(meshNamespace).Get(ctx, daemonSet, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		old := ds.Spec.Template.Spec.Containers[0].Image
		newImage := newAgentImage(old)

		By("creating meshed pods in a loop during helm upgrade")
		stop := make(chan struct{})
		var names []string
		var mu sync.Mutex
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer GinkgoRecover()
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p := meshedPod(fmt.Sprintf("loop-%d", i), a, linkerd, nil)
				if _, err := client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err == nil {
					mu.Lock()
					names = append(names, p.Name)
					mu.Unlock()
				}
				time.Sleep(700 * time.Millisecond) // pacing of the load, not a wait: a slower upgrade meets more pods
			}
		}()
		helmInstall(newImage, "--set", "logLevel=debug")
		waitDaemonSetReady(ctx, client, 3*time.Minute)
		close(stop)
		wg.Wait()
		Expect(len(names)).To(BeNumerically(">=", 3))

		ds, err = client.AppsV1().DaemonSets(meshNamespace).Get(ctx, daemonSet, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(ds.Spec.Template.Spec.Containers[0].Image).To(Equal(newImage))

		for _, name := range names {
			waitRunning(ctx, ns, name)
			Expect(meshedOutbound(ns, name, peer.Status.PodIP)).To(BeTrue(), "pod %s started unmeshed", name)
		}
	})
})

var _ = Describe("uninstall", Serial, Ordered, Label("uninstall"), func() {
	It("restores the primary conflist, removes the binaries, and pods still start", func(ctx SpecContext) {
		a, b := twoNodes(ctx)
		node := nodeByName(a)
		path, chained := primaryConf(node)
		Expect(pluginTypes(chained)).To(ContainElement("mesh-cni"))
		// The plugin and the helper it runs for its API lookup sit side
		// by side in the bin dir (GKE-like: /home/kubernetes/bin).
		bins, err := nodeExec(node, "sh", "-c",
			"for d in /opt/cni/bin /home/kubernetes/bin; do if [ -d $d ]; then ls $d; fi; done")
		Expect(err).NotTo(HaveOccurred(), bins)
		Expect(strings.Fields(bins)).To(ContainElements("mesh-cni", "mesh-cni-podget"))

		By("uninstalling (" + env.Install + ")")
		// Install again afterwards, pass or fail, for the specs that follow.
		DeferCleanup(func(ctx SpecContext) { reinstall(ctx) })
		uninstall(ctx)

		Eventually(ctx, func() []string {
			_, c := primaryConf(node)
			return pluginTypes(c)
		}).WithTimeout(testenv.Scale(2 * time.Minute)).WithPolling(time.Second).ShouldNot(ContainElement("mesh-cni"))
		p2, restored := primaryConf(node)
		Expect(p2).To(Equal(path))
		Expect(pluginTypes(restored)).To(Equal(withoutMesh(pluginTypes(chained))))
		if wrote, ok := primaryWrote(ctx); ok {
			Expect(restored).To(Equal(wrote), "%s on %s, byte for byte as the primary wrote it", path, a)
		}
		// The GKE-like cluster keeps its binaries in /home/kubernetes/bin;
		// list whichever bin dirs the node has.
		out, err := nodeExec(node, "sh", "-c",
			"for d in /opt/cni/bin /home/kubernetes/bin; do if [ -d $d ]; then ls $d; fi; done")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(strings.Fields(out)).To(ContainElement(primaryBinary()), "the primary's binaries must still be listed")
		Expect(out).NotTo(ContainSubstring("mesh-cni"))

		ns := newNamespace(ctx, "e2e-uninstall")
		got := startPods(ctx, ns, plainPod("peer", b), meshedPod("client", a, linkerd, nil))
		r := mustConnect(ns, "client", "app", got["peer"].Status.PodIP, 8080)
		Expect(r.Name).To(Equal("peer"), "no redirect after uninstall")

	})
})

func withoutMesh(types []string) []string {
	var out []string
	for _, t := range types {
		if t != "mesh-cni" {
			out = append(out, t)
		}
	}
	return out
}

func uninstall(ctx context.Context) {
	stops := followAgentStops(ctx)
	switch env.Install {
	case "helm":
		out, err := run(tool("HELM", "helm"), helmArgs("uninstall", release, "--namespace", meshNamespace, "--wait", "--timeout", timeoutFlag(3*time.Minute))...)
		Expect(err).NotTo(HaveOccurred(), out)
	default:
		out, err := kubectl("delete", "daemonset", "-n", meshNamespace, daemonSet, "--wait", "--timeout", timeoutFlag(3*time.Minute))
		Expect(err).NotTo(HaveOccurred(), out)
	}
	Eventually(ctx, func() int {
		pods, err := client.CoreV1().Pods(meshNamespace).List(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred())
		n := 0
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				n++
			}
		}
		return n
	}).WithTimeout(testenv.Scale(3 * time.Minute)).WithPolling(2 * time.Second).Should(BeZero())
	stops.expectUninstalled()
}

func reinstall(ctx context.Context) {
	install(ctx, env, env.MeshImage)
}

// fullRef is the name containerd stores an image under (docker's normalisation).
func fullRef(image string) string {
	first, _, found := strings.Cut(image, "/")
	switch {
	case !found:
		return "docker.io/library/" + image
	case strings.ContainsAny(first, ".:") || first == "localhost":
		return image
	default:
		return "docker.io/" + image
	}
}

// newAgentImage makes an image the DaemonSet does not run yet, with the same
// binaries: in the registry, a copy of the node platform's image with one
// label more (another digest); else the loaded image tagged anew on every node.
func newAgentImage(old string) string {
	if env.Release != nil {
		By("pushing a relabelled copy of the release's image to the registry")
		crane := filepath.Join(releaseTools(), "crane")
		src := env.Release["REGISTRY"] + "/mesh-cni@" + env.Release["IMAGE_DIGEST_AMD64"]
		dst := env.Release["REGISTRY"] + "/mesh-cni:e2e-upgrade"
		out, err := run(crane, "mutate", "--label", "e2e-upgrade="+strconv.FormatInt(time.Now().UnixNano(), 10), src, "-t", dst)
		Expect(err).NotTo(HaveOccurred(), out)
		digest, err := run(crane, "digest", dst)
		Expect(err).NotTo(HaveOccurred(), digest)
		return env.Release["REGISTRY"] + "/mesh-cni@" + strings.TrimSpace(digest)
	}
	By("tagging the loaded image with a new tag on every node")
	repo, _ := splitImage(old)
	newImage := repo + ":e2e-upgrade"
	all, err := provider().ListNodes(env.Cluster)
	Expect(err).NotTo(HaveOccurred())
	for _, n := range all {
		out, err := nodeExec(n, "ctr", "-n", "k8s.io", "images", "tag", "--force", fullRef(old), fullRef(newImage))
		Expect(err).NotTo(HaveOccurred(), out)
	}
	return newImage
}
