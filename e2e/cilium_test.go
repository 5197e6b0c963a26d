//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// Cilium as the primary (E2E_PRIMARY=cilium): its chart, from the module
// hack/cilium pins (hack/build-cilium.sh chart), installed with Helm into
// kube-system with hack/cilium/kind-values.yaml and E2E_PRIMARY_SET (extra
// --set values, e.g. cni.exclusive=true); its images from
// E2E_PRIMARY_IMAGES (hack/build-cilium.sh).
const (
	ciliumApp       = "cilium" // the agent pods' k8s-app label
	ciliumDaemonSet = "cilium"
	// ciliumWrote is what the agent logs each time it rewrites its conflist
	// (cilium daemon/cmd/cni/config.go, setupCNIConfFile).
	ciliumWrote = "Wrote CNI configuration file"
)

func installCilium(ctx context.Context, s shared) {
	By("loading Cilium's images")
	tars := strings.Fields(os.Getenv("E2E_PRIMARY_IMAGES"))
	Expect(tars).NotTo(BeEmpty(), "E2E_PRIMARY_IMAGES lists Cilium's image tarball (hack/build-cilium.sh)")
	for _, t := range tars {
		loadArchive(s.Cluster, t)
	}
	chart := os.Getenv("E2E_PRIMARY_CHART")
	if chart == "" {
		out, err := exec.Command("bash", filepath.Join(repoRoot(), "hack", "build-cilium.sh"), "chart").Output()
		Expect(err).NotTo(HaveOccurred(), "hack/build-cilium.sh chart")
		chart = strings.TrimSpace(string(out))
	}
	args := []string{"install", "cilium", chart, "--namespace", "kube-system",
		"-f", filepath.Join(repoRoot(), "hack", "cilium", "kind-values.yaml")}
	for _, kv := range strings.Fields(os.Getenv("E2E_PRIMARY_SET")) {
		args = append(args, "--set", kv)
	}
	By("helm " + strings.Join(args, " "))
	start := time.Now()
	out, err := run(tool("HELM", "helm"), helmArgs(args...)...)
	Expect(err).NotTo(HaveOccurred(), out)
	cs := clientFor(s.Kubeconfig)
	waitCiliumReady(ctx, cs)
	GinkgoWriter.Printf("Cilium ready on every node: %s\n", time.Since(start).Round(time.Second))
}

// waitCiliumReady waits for an updated, ready agent on every node and every
// node Ready.
func waitCiliumReady(ctx context.Context, cs kubernetes.Interface) {
	By("waiting for Cilium on every node and every node Ready")
	waitDaemonSetOnEveryNode(ctx, cs, "kube-system", ciliumDaemonSet, 6*time.Minute, dsWait{nodesReady: true, updated: true})
}

// ciliumWrites counts the conflist rewrites an agent pod has logged.
func ciliumWrites(ctx context.Context, p *corev1.Pod) int {
	logs, err := client.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: "cilium-agent"}).DoRaw(ctx)
	if err != nil {
		return 0
	}
	return strings.Count(string(logs), ciliumWrote)
}

func ciliumAgents(ctx context.Context) []corev1.Pod {
	pods, err := client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=" + ciliumApp})
	Expect(err).NotTo(HaveOccurred())
	return pods.Items
}

// ciliumExclusive reads cni-exclusive from the running cilium-config.
func ciliumExclusive(ctx context.Context) bool {
	cm, err := client.CoreV1().ConfigMaps("kube-system").Get(ctx, "cilium-config", metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	b, _ := strconv.ParseBool(cm.Data["cni-exclusive"])
	return b
}

// Each Cilium agent start rewrites 05-cilium.conflist from its template,
// without the chain entry; with cni.exclusive it does so again on every
// change in the conf dir. Meshed pods keep being created on every node
// while every agent is restarted, round after round.
var _ = Describe("Cilium as the primary, its agents restarted under pod churn", Serial, Ordered, Label("cilium"), func() {
	It("chains again after every rewrite, and every pod created meanwhile starts redirected", func(ctx SpecContext) {
		if env.Primary != primaryCilium {
			Skip("Cilium is not the primary (E2E_PRIMARY=cilium)")
		}
		exclusive := ciliumExclusive(ctx)
		rounds, err := strconv.Atoi(getenv("E2E_CILIUM_RESTARTS", "3"))
		Expect(err).NotTo(HaveOccurred(), "E2E_CILIUM_RESTARTS")
		nodeNames := schedulableNodes(ctx)
		_, b := twoNodes(ctx)
		ns := newNamespace(ctx, "e2e-cilium")
		peer := startPods(ctx, ns, plainPod("peer", b))["peer"]

		samplers := startChainSamplers()
		load := startMeshedLoad(ns, nodeNames)
		rewrites := 0
		var phases []string
		for i := 1; i <= rounds; i++ {
			phase := fmt.Sprintf("cilium restart %d", i)
			phases = append(phases, phase)
			By(phase + ": deleting every Cilium agent pod")
			load.phase(phase)
			old := map[types.UID]bool{}
			for _, p := range ciliumAgents(ctx) {
				rewrites += ciliumWrites(ctx, &p)
				old[p.UID] = true
				Expect(client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})).To(Succeed())
			}
			// Every new agent has rewritten its conflist, and every node's
			// holds the chain entry again.
			Eventually(ctx, func(g Gomega) {
				fresh := 0
				for _, p := range ciliumAgents(ctx) {
					if !old[p.UID] && ciliumWrites(ctx, &p) > 0 {
						fresh++
					}
				}
				g.Expect(fresh).To(Equal(len(old)), "new agents that rewrote their conflist")
				all, err := provider().ListNodes(env.Cluster)
				g.Expect(err).NotTo(HaveOccurred())
				for _, n := range all {
					path, c := primaryConf(n)
					g.Expect(pluginTypes(c)).To(ContainElement("mesh-cni"), "%s on %s", path, n)
				}
			}).WithTimeout(testenv.Scale(4 * time.Minute)).WithPolling(time.Second).Should(Succeed())
			waitCiliumReady(ctx, client)
		}
		load.phase("settled")
		time.Sleep(3 * time.Second) // pacing: pods of the settled phase too, after the last restart
		created := load.stop()
		report := samplers.stop()
		for _, p := range ciliumAgents(ctx) {
			rewrites += ciliumWrites(ctx, &p)
		}

		AddReportEntry("cilium", fmt.Sprintf("cni-exclusive=%v, %d restart rounds, %d conflist rewrites logged by the agents", exclusive, rounds, rewrites))
		GinkgoWriter.Printf("cni-exclusive=%v: %d restart rounds of every agent, %d conflist rewrites logged\n", exclusive, rounds, rewrites)
		for _, r := range report {
			GinkgoWriter.Printf("%s: %d samples, longest interval between samples %s, %d without the entry (longest gap %s), %d not valid JSON\n",
				r.node, r.samples, r.maxInterval, r.missing, r.longestGap, r.invalid)
			AddReportEntry("chain samples "+r.node, fmt.Sprintf("%d samples, %d missing, longest gap %s, %d invalid", r.samples, r.missing, r.longestGap, r.invalid))
		}

		By("every pod of every phase runs and its traffic reaches its proxy")
		perPhase := map[string]int{}
		var unredirected []string
		for _, p := range created {
			waitRunning(ctx, ns, p.name)
			if meshedOutbound(ns, p.name, peer.Status.PodIP) {
				perPhase[p.phase]++
			} else {
				unredirected = append(unredirected, p.name+" ("+p.phase+")")
			}
		}
		AddReportEntry("pods created and redirected per phase", perPhase)
		GinkgoWriter.Printf("pods created and redirected per phase: %v; unredirected: %v\n", perPhase, unredirected)
		if exclusive {
			exclusiveRefused(ctx, nodeNames, len(unredirected))
			return
		}
		Expect(unredirected).To(BeEmpty(), "pods that started without the redirect")
		for _, ph := range phases {
			Expect(perPhase[ph]).To(BeNumerically(">=", 1), "no pod was created during %q", ph)
		}
		for _, r := range report {
			Expect(r.samples).To(BeNumerically(">", 10), "%s: too few samples", r.node)
			Expect(r.invalid).To(BeZero(), "%s: the conflist was not valid JSON at some sample", r.node)
		}
	})
})

// exclusiveRefused is the cni.exclusive=true outcome, measured: Cilium
// rewrites its conflist on every change in the conf dir, mesh-cni's re-chain
// is such a change, and the two rewrite each other without end; pods created
// while Cilium's version is on disk start unredirected. So that setting is
// refused rather than supported: `mesh-cnictl check` fails naming the fix,
// and the agents say so on their Node in a Warning Event. Should a Cilium
// release stop the loop, the first assertion fails and the refusal
// (internal/ctl/check/cilium.go) is to be revisited.
func exclusiveRefused(ctx context.Context, nodes []string, unredirected int) {
	Expect(unredirected).To(BeNumerically(">", 0),
		"cni.exclusive=true no longer leaves pods unredirected: revisit check's refusal of it")
	By("mesh-cnictl check refuses cni-exclusive=true and names the fix")
	out, err := run(filepath.Join(repoRoot(), "bin", "kubectl-mesh_cni"), "check", "-n", meshNamespace, "--kubeconfig", env.Kubeconfig)
	Expect(err).To(HaveOccurred(), "check passed with cni-exclusive=true:\n%s", out)
	Expect(out).To(ContainSubstring("cni.exclusive=false"))
	By("the agents report the fight on their Node, with Cilium's setting as the hint")
	for _, n := range nodes {
		Eventually(ctx, func() []string { return nodeEventReasons(ctx, n) }).
			WithTimeout(testenv.Scale(time.Minute)).Should(ContainElement("MeshCNIConfigFight"), "node %s", n)
	}
}
