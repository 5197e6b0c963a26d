//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mesh-cni/mesh-cni/internal/agent"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// Istio's own CNI node agent (install-cni and the istio-cni plugin, built
// from the version pinned in hack/istio/go.mod, image from
// `hack/istio-images.sh cni`) installed with Istio's own chart from that
// module, and the switch to mesh-cni and back done as docs/istio.md says,
// while pods with Istio's contract keep being created on every node.
//
// The pods are the suite's Istio-contract pods (the injector's
// sidecar.istio.io/status annotation and an istio-proxy container as UID
// 1337), not pods injected by istiod: both plugins decide from exactly that
// contract (the istio-real specs prove the suite's contract is what istiod
// writes), they carry no istio-validation init container, so a pod left
// unredirected still starts and is caught here by its netns and its proxy's
// record rather than by a crash loop, and the spec does not depend on the
// control plane's webhook. What tells which plugin set a pod up is the pod's
// netns, read from the node: Istio's plugin writes iptables chains named
// ISTIO_*, mesh-cni's MESH_* (nftables table mesh_cni, or iptables).

const (
	istioCNIRelease   = "istio-cni"
	istioCNINamespace = "istio-system"
	istioCNIDaemonSet = "istio-cni-node"
	// The load's pace: a pod every 2 s on the nodes in turn.
	migratePace = 2 * time.Second
)

// rulesOwner is whose redirect rules a pod's netns holds.
type rulesOwner string

const (
	ownerIstio rulesOwner = "istio-cni"
	ownerMesh  rulesOwner = "mesh-cni"
	ownerBoth  rulesOwner = "both"
	ownerNone  rulesOwner = "none"
)

var _ = Describe("migrate in place from Istio's own CNI and back", Serial, Ordered, Label("migrate"), func() {
	It("redirects every pod created before, during and after each switch exactly once", func(ctx SpecContext) {
		if env.Install != "helm" {
			Skip("the switch installs mesh-cni with Helm; this run installed with " + env.Install)
		}
		images := os.Getenv("E2E_ISTIO_CNI_IMAGES")
		if images == "" {
			Skip("E2E_ISTIO_CNI_IMAGES is not set: the tarball of `hack/istio-images.sh cni` (make test-e2e-ci sets it)")
		}
		// Sabotage: take istio-cni away first and install mesh-cni without
		// migrateFrom afterwards; the pods in between start unredirected
		// and the spec must fail.
		sabotage := os.Getenv("E2E_MIGRATE_SABOTAGE") == "1"
		chart := istioCNIChart()
		tag := istioCNITag(images)
		nodeNames := schedulableNodes(ctx)
		_, b := twoNodes(ctx)
		ns := newNamespace(ctx, "e2e-migrate")
		peer := startPods(ctx, ns, plainPod("peer", b))["peer"]
		image := currentAgentImage(ctx)

		By("removing the suite's mesh-cni: the cluster starts with Istio's CNI alone")
		uninstall(ctx)
		DeferCleanup(func(ctx SpecContext) {
			// Whatever happened, the suite goes on with its own release.
			helmUninstallIstioCNI(ctx)
			restorePrimaryAsWritten(ctx)
			helmInstall(image)
			waitDaemonSetReady(ctx, client, 3*time.Minute)
		})
		By("loading Istio's install-cni image (" + filepath.Base(images) + ") into every node")
		loadArchive(env.Cluster, images)
		helmInstallIstioCNI(ctx, chart, tag)
		expectChains(ctx, []string{"istio-cni"}, []string{"mesh-cni"})

		load := startLoad(ns, "m", nodeNames, istio, migratePace)
		stopped := false
		defer func() {
			if !stopped {
				load.stop()
			}
		}()
		settle := func(phase string) {
			load.phase(phase)
			Eventually(ctx, func() int { return load.count(phase) }).
				WithTimeout(testenv.Scale(time.Minute)).WithPolling(time.Second).Should(BeNumerically(">=", 2),
				"pods created in phase %q", phase)
		}
		settle("istio-cni")

		if sabotage {
			By("(sabotage) removing istio-cni first, then installing mesh-cni without migrateFrom")
			load.phase("istio-cni removed")
			helmUninstallIstioCNI(ctx)
			settle("neither")
			load.phase("mesh-cni installing")
			helmInstall(image)
			waitDaemonSetReady(ctx, client, 3*time.Minute)
		} else {
			By("installing mesh-cni with migrateFrom=istio-cni (docs/istio.md, Migrate in place)")
			load.phase("mesh-cni taking over")
			helmInstall(image, "--set", "migrateFrom=istio-cni")
			waitDaemonSetReady(ctx, client, 3*time.Minute)
			if env.Release != nil {
				releaseCheck(env.Release)
			}
			By("helm uninstall istio-cni")
			load.phase("istio-cni removing")
			helmUninstallIstioCNI(ctx)
		}
		expectChains(ctx, []string{"mesh-cni"}, []string{"istio-cni"})
		settle("mesh-cni")

		By("old pods delete cleanly after the switch: those of the istio-cni phase")
		for _, p := range load.createdIn("istio-cni")[:1] {
			deletePodAndWait(ctx, ns, p.name)
			load.forget(p.name)
		}

		By("going back (docs/istio.md, Going back to istio-cni): handBackTo=istio-cni, helm install istio-cni, helm uninstall mesh-cni")
		load.phase("mesh-cni set to hand back")
		helmInstall(image, "--set", "migrateFrom=", "--set", "handBackTo=istio-cni")
		waitDaemonSetReady(ctx, client, 3*time.Minute)
		load.phase("istio-cni coming back")
		helmInstallIstioCNI(ctx, chart, tag)
		waitHandedBack(ctx, "istio-cni")
		load.phase("mesh-cni removing")
		uninstall(ctx)
		expectChains(ctx, []string{"istio-cni"}, []string{"mesh-cni"})
		settle("istio-cni again")
		created := load.stop()
		stopped = true

		By("every pod of every phase runs, reaches its proxy, and its netns holds one mesh's rules (both only in a switch's window)")
		type tally struct{ pods, istio, mesh, both, none, unredirected int }
		perPhase := map[string]*tally{}
		var order []string
		var bad []string
		for _, p := range created {
			t := perPhase[p.phase]
			if t == nil {
				t = &tally{}
				perPhase[p.phase] = t
				order = append(order, p.phase)
			}
			t.pods++
			pod := waitRunning(ctx, ns, p.name)
			owner := podRulesOwner(pod.Spec.NodeName, pod.Status.PodIP)
			switch owner {
			case ownerIstio:
				t.istio++
			case ownerMesh:
				t.mesh++
			case ownerBoth:
				t.both++
			default:
				t.none++
			}
			redirected := meshedOutboundOnce(ns, p.name, peer.Status.PodIP)
			if !redirected {
				t.unredirected++
			}
			want := expectedOwner(p.phase)
			// While both entries are in the list (istio-cni re-inserts
			// its own until it is gone, docs/istio.md), a pod may get both
			// plugins' rules: the first NAT rule a connection meets binds
			// it, so it must still reach its proxy once each way.
			window := owner == ownerBoth && want == "" &&
				meshedInboundOnce(ns, peer.Name, pod.Status.PodIP)
			if owner == ownerBoth && !window || owner == ownerNone || !redirected || (want != "" && owner != want) {
				bad = append(bad, fmt.Sprintf("pod %s (phase %q, node %s): rules of %s, app traffic reached the proxy: %t", p.name, p.phase, pod.Spec.NodeName, owner, redirected))
			}
		}
		var lines []string
		for _, ph := range order {
			t := perPhase[ph]
			lines = append(lines, fmt.Sprintf("%s: %d pods (istio-cni rules %d, mesh-cni rules %d, both %d, none %d; unredirected %d)",
				ph, t.pods, t.istio, t.mesh, t.both, t.none, t.unredirected))
		}
		GinkgoWriter.Printf("pods per phase:\n  %s\n", strings.Join(lines, "\n  "))
		AddReportEntry("pods per phase", strings.Join(lines, "; "))
		Expect(bad).To(BeEmpty(), "pods not redirected exactly once")

		By("no pod sandbox failed but for try-again answers and istio-cni's own binary going away")
		events, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedCreatePodSandBox"})
		Expect(err).NotTo(HaveOccurred())
		var failures, retried []string
		for _, e := range events.Items {
			m := e.InvolvedObject.Name + ": " + e.Message
			// Code 11 (mesh-cni cannot judge the pod yet), and a runtime
			// that still ran a list naming istio-cni once Istio's cleanup
			// had removed its binary: the kubelet retries, and the pod
			// must still have started (checked above).
			if strings.Contains(e.Message, "cannot judge pod") || strings.Contains(e.Message, "istio-cni") {
				retried = append(retried, m)
				continue
			}
			failures = append(failures, m)
		}
		sort.Strings(failures)
		GinkgoWriter.Printf("sandbox retries: %d %v\n", len(retried), retried)
		AddReportEntry("sandbox retries", fmt.Sprint(len(retried)))
		Expect(failures).To(BeEmpty(), "sandbox failures")

		By("every pod deletes cleanly with istio-cni back in charge")
		for _, p := range created {
			Expect(client.CoreV1().Pods(ns).Delete(ctx, p.name, metav1.DeleteOptions{})).To(Succeed())
		}
		Eventually(ctx, func(g Gomega) {
			pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			var left []string
			for _, p := range pods.Items {
				if p.Name != "peer" {
					left = append(left, p.Name+" ("+podProblem(&p)+")")
				}
			}
			g.Expect(left).To(BeEmpty(), "pods not deleted")
		}).WithTimeout(testenv.Scale(2 * time.Minute)).WithPolling(2 * time.Second).Should(Succeed())
	})
})

// expectedOwner is whose rules a pod of a settled phase must hold ("" while
// a switch is under way: either, but only one).
func expectedOwner(phase string) rulesOwner {
	switch phase {
	case "istio-cni", "istio-cni again":
		return ownerIstio
	case "mesh-cni":
		return ownerMesh
	}
	return ""
}

// meshedOutboundOnce: the app's connection reaches the proxy with its
// original destination (the record names the peer's address, so the
// connection was redirected once, not to the proxy's own port again).
func meshedOutboundOnce(ns, pod, peerIP string) bool {
	r, err := connectEventually(ns, pod, peerIP)
	return err == nil && r.Name == "proxy" && r.Role == "outbound" && r.Port == istio.outbound && r.Orig == hostPort(peerIP, 8080)
}

// meshedInboundOnce: a connection from the peer pod to the app's port
// reaches the pod's proxy on its inbound port with its original
// destination.
func meshedInboundOnce(ns, peerPod, podIP string) bool {
	r, err := connect(ns, peerPod, "app", podIP, 8080)
	return err == nil && r.Name == "proxy" && r.Role == "inbound" && r.Port == istio.inbound && r.Orig == hostPort(podIP, 8080)
}

func connectEventually(ns, pod, peerIP string) (record, error) {
	var r record
	var err error
	deadline := time.Now().Add(testenv.Scale(30 * time.Second))
	for {
		if r, err = connect(ns, pod, "app", peerIP, 8080); err == nil || time.Now().After(deadline) {
			return r, err
		}
		time.Sleep(time.Second)
	}
}

// podRulesOwner reads the netns of the pod with ip on node (the one among
// the runtime's /var/run/netns that holds the address) and says whose
// redirect rules it holds: nftables (mesh-cni's table and iptables-nft's
// tables alike) and the legacy iptables tables, both families.
func podRulesOwner(node, ip string) rulesOwner {
	script := fmt.Sprintf(`for p in /var/run/netns/*; do
  n=$(basename "$p")
  if ip -n "$n" -o addr show 2>/dev/null | grep -q " %s/"; then
    ip netns exec "$n" sh -c 'nft list ruleset; iptables-legacy-save; ip6tables-legacy-save' 2>/dev/null
    exit 0
  fi
done
echo "no netns on this node holds %s" >&2
exit 1`, ip, ip)
	out, err := nodeExec(nodeByName(node), "sh", "-c", script)
	Expect(err).NotTo(HaveOccurred(), out)
	istioRules := strings.Contains(out, "ISTIO_OUTPUT") || strings.Contains(out, "ISTIO_INBOUND")
	meshRules := strings.Contains(out, "MESH_OUTPUT") || strings.Contains(out, "MESH_INBOUND")
	switch {
	case istioRules && meshRules:
		return ownerBoth
	case istioRules:
		return ownerIstio
	case meshRules:
		return ownerMesh
	}
	return ownerNone
}

// waitHandedBack waits until every node's agent status says the node went
// back to plugin (handBackTo), as docs/istio.md tells users to.
func waitHandedBack(ctx context.Context, plugin string) {
	Eventually(ctx, func(g Gomega) {
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		for _, n := range nodes.Items {
			var st agent.Status
			g.Expect(json.Unmarshal([]byte(n.Annotations[agent.StatusAnnotation]), &st)).To(Succeed(), "node %s", n.Name)
			g.Expect(st.HandedBack).To(Equal(plugin), "node %s: %s", n.Name, n.Annotations[agent.StatusAnnotation])
		}
	}).WithTimeout(testenv.Scale(time.Minute)).WithPolling(time.Second).Should(Succeed())
}

// expectChains waits until every node's primary conflist holds the plugin
// types in want and none in not.
func expectChains(ctx context.Context, want, not []string) {
	all, err := provider().ListNodes(env.Cluster)
	Expect(err).NotTo(HaveOccurred())
	for _, n := range all {
		Eventually(ctx, func(g Gomega) {
			_, conf := primaryConf(n)
			types := pluginTypes(conf)
			for _, w := range want {
				g.Expect(types).To(ContainElement(w), "%s: %v", n, types)
			}
			for _, w := range not {
				g.Expect(types).NotTo(ContainElement(w), "%s: %v", n, types)
			}
		}).WithTimeout(testenv.Scale(time.Minute)).WithPolling(time.Second).Should(Succeed())
	}
}

// istioCNIChart is Istio's istio-cni chart in the pinned module
// (E2E_ISTIO_CNI_CHART, else the module's directory as go reports it).
func istioCNIChart() string {
	if c := os.Getenv("E2E_ISTIO_CNI_CHART"); c != "" {
		return c
	}
	cmd := exec.Command(getenv("GO", "go"), "list", "-m", "-f", "{{.Dir}}", "istio.io/istio")
	cmd.Dir = filepath.Join(repoRoot(), "hack", "istio")
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	Expect(err).NotTo(HaveOccurred(), "go list -m istio.io/istio in hack/istio")
	dir := filepath.Join(strings.TrimSpace(string(out)), "manifests", "charts", "istio-cni")
	_, err = os.Stat(filepath.Join(dir, "Chart.yaml"))
	Expect(err).NotTo(HaveOccurred(), "Istio's istio-cni chart")
	return dir
}

// istioCNITag is the tag of the install-cni image in the tarball.
func istioCNITag(tar string) string {
	for _, t := range archiveTags(tar) {
		if repo, tg := splitImage(t); repo == istioHub+"/install-cni" {
			return tg
		}
	}
	Fail("no " + istioHub + "/install-cni image in " + tar)
	return ""
}

// helmInstallIstioCNI installs Istio's istio-cni chart as Istio's docs do
// (helm install istio-cni ... -n istio-system) with the values kind with
// flannel needs: the runtime's bin and conf dirs, chained to the primary's
// conflist, the local image, and repair off (the image is FROM scratch,
// without the iptables tools Istio's repair runs in the container).
func helmInstallIstioCNI(ctx context.Context, chart, tag string) {
	By("helm install istio-cni (Istio's chart, image " + istioHub + "/install-cni:" + tag + ")")
	out, err := run(tool("HELM", "helm"), helmArgs("upgrade", "--install", istioCNIRelease, chart,
		"--namespace", istioCNINamespace, "--create-namespace",
		"--set", "hub="+istioHub, "--set", "tag="+tag, "--set", "pullPolicy=Never",
		"--set", "cniBinDir=/opt/cni/bin", "--set", "cniConfDir=/etc/cni/net.d", "--set", "chained=true",
		"--set", "repair.enabled=false",
		"--set", "resources.requests.cpu=10m", "--set", "resources.requests.memory=32Mi",
		"--wait", "--timeout", timeoutFlag(3*time.Minute))...)
	Expect(err).NotTo(HaveOccurred(), out)
	waitDaemonSetOnEveryNode(ctx, client, istioCNINamespace, istioCNIDaemonSet, 3*time.Minute, dsWait{})
}

// helmUninstallIstioCNI removes Istio's CNI release, if installed, and
// waits until its pods are gone (each cleans its entry up as it exits).
func helmUninstallIstioCNI(ctx context.Context) {
	out, err := run(tool("HELM", "helm"), helmArgs("status", istioCNIRelease, "--namespace", istioCNINamespace)...)
	if err != nil && strings.Contains(out, "not found") {
		return
	}
	out, err = run(tool("HELM", "helm"), helmArgs("uninstall", istioCNIRelease, "--namespace", istioCNINamespace,
		"--wait", "--timeout", timeoutFlag(3*time.Minute))...)
	Expect(err).NotTo(HaveOccurred(), out)
	Eventually(ctx, func() int {
		pods, err := client.CoreV1().Pods(istioCNINamespace).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=istio-cni-node"})
		Expect(err).NotTo(HaveOccurred())
		return len(pods.Items)
	}).WithTimeout(testenv.Scale(3 * time.Minute)).WithPolling(2 * time.Second).Should(BeZero())
}

func deletePodAndWait(ctx context.Context, ns, name string) {
	Expect(client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{})).To(Succeed())
	Eventually(ctx, func() bool {
		_, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err != nil
	}).WithTimeout(testenv.Scale(time.Minute)).WithPolling(time.Second).Should(BeTrue(), "pod %s/%s was not deleted", ns, name)
}

// restorePrimaryAsWritten puts back the primary's conflist byte for byte as
// the primary wrote it on every node, as the primary's own installer does
// when it restarts: Istio's install-cni rewrites the whole file (its own key
// order and indentation) when it inserts and removes its entry, so after it
// is gone the plugins are the primary's but the bytes are Istio's, and the
// specs that follow compare against the primary's bytes. Only the bytes
// change: a file that still chains another plugin is left alone.
func restorePrimaryAsWritten(ctx context.Context) {
	wrote, ok := primaryWrote(ctx)
	if !ok {
		return
	}
	all, err := provider().ListNodes(env.Cluster)
	Expect(err).NotTo(HaveOccurred())
	for _, n := range all {
		path, conf := primaryConf(n)
		if conf == wrote || !slices.Equal(pluginTypes(conf), pluginTypes(wrote)) {
			continue // as written, or another plugin still chained (a failed run)
		}
		var out strings.Builder
		err := n.Command("sh", "-c", "cat > "+path+".e2e && mv "+path+".e2e "+path).
			SetStdin(strings.NewReader(wrote)).SetStdout(&out).SetStderr(&out).Run()
		Expect(err).NotTo(HaveOccurred(), out.String())
	}
}
