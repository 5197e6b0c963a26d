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
	args := []string{"install", "cilium", ciliumChart(), "--namespace", "kube-system",
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

// ciliumChart is the chart's directory: E2E_PRIMARY_CHART, else the one in
// the module hack/cilium pins.
func ciliumChart() string {
	if chart := os.Getenv("E2E_PRIMARY_CHART"); chart != "" {
		return chart
	}
	out, err := exec.Command("bash", filepath.Join(repoRoot(), "hack", "build-cilium.sh"), "chart").Output()
	Expect(err).NotTo(HaveOccurred(), "hack/build-cilium.sh chart")
	return strings.TrimSpace(string(out))
}

// setCiliumExclusive sets cni.exclusive in cilium-config with a Helm
// upgrade. The chart does not roll the agents on a config change
// (rollOutCiliumPods=false), so the agents started next read it: the
// restart rounds that follow, or restartCilium.
func setCiliumExclusive(ctx context.Context, exclusive bool) {
	if ciliumExclusive(ctx) == exclusive {
		return
	}
	args := []string{"upgrade", "cilium", ciliumChart(), "--namespace", "kube-system", "--reuse-values",
		"--set", "cni.exclusive=" + strconv.FormatBool(exclusive)}
	By("helm " + strings.Join(args, " "))
	out, err := run(tool("HELM", "helm"), helmArgs(args...)...)
	Expect(err).NotTo(HaveOccurred(), out)
	Expect(ciliumExclusive(ctx)).To(Equal(exclusive), "cni-exclusive in cilium-config after the upgrade")
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

// restartCilium deletes every agent pod and waits until each new agent has
// rewritten its conflist, every node's conflist holds the chain entry again
// and every agent is ready. It returns the rewrites the old agents logged.
func restartCilium(ctx context.Context) (rewrites int) {
	old := map[types.UID]bool{}
	for _, p := range ciliumAgents(ctx) {
		rewrites += ciliumWrites(ctx, &p)
		old[p.UID] = true
		Expect(client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})).To(Succeed())
	}
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
	return rewrites
}

// ciliumPace is how often the churn creates a meshed pod, on each node in
// turn: one per node every 6 s on two nodes, a third of what a Cilium agent
// admits. Its endpoint-create API takes 0.5 requests/s (burst 4) and has a
// request wait at most 60 s before answering 429, after which the kubelet
// backs off (cilium/cilium v1.20.2 daemon/restapi/api_limits.go:58-67);
// pods queued behind an agent's restart reach it together. At the 1.5 s of
// the upgrade spec they queued long enough there for the kubelet's retry to
// miss the wait below.
const ciliumPace = 3 * time.Second

// ciliumStartBound is how long the churn's pods may go, once the churn
// ends, without one more of them starting: Cilium's own budget for one
// sandbox ("Kubelet has a PodSandbox creation timeout of 4 minutes, in
// total", same file, line 66). Together they take longer on a slower
// machine (28 pods in 2 min beside make test's other lanes).
const ciliumStartBound = 4 * time.Minute

// ciliumChurn is what one cni.exclusive setting does to meshed pods: while
// a meshed pod is created every ciliumPace on each node in turn, every
// agent is restarted, rounds times; each node's conflist is sampled
// meanwhile.
type ciliumChurn struct {
	rewrites     int
	agentWrites  []int // per agent running at the end, its rewrites
	phases       []string
	report       []chainReport
	perPhase     map[string]int // pods created and redirected
	unredirected []string
}

func churnCilium(ctx context.Context, rounds int) ciliumChurn {
	nodeNames := schedulableNodes(ctx)
	_, b := twoNodes(ctx)
	ns := newNamespace(ctx, "e2e-cilium")
	peer := startPods(ctx, ns, plainPod("peer", b))["peer"]

	var c ciliumChurn
	samplers := startChainSamplers()
	load := startLoad(ns, "v", nodeNames, linkerd, ciliumPace)
	for i := 1; i <= rounds; i++ {
		phase := fmt.Sprintf("cilium restart %d", i)
		c.phases = append(c.phases, phase)
		By(phase + ": deleting every Cilium agent pod")
		load.phase(phase)
		c.rewrites += restartCilium(ctx)
	}
	load.phase("settled")
	time.Sleep(ciliumPace) // pacing: a pod of the settled phase too, after the last restart
	created := load.stop()
	c.report = samplers.stop()
	for _, p := range ciliumAgents(ctx) {
		n := ciliumWrites(ctx, &p)
		c.rewrites += n
		c.agentWrites = append(c.agentWrites, n)
	}

	exclusive := ciliumExclusive(ctx)
	AddReportEntry("cilium", fmt.Sprintf("cni-exclusive=%v, %d restart rounds, %d conflist rewrites logged by the agents", exclusive, rounds, c.rewrites))
	GinkgoWriter.Printf("cni-exclusive=%v: %d restart rounds of every agent, %d conflist rewrites logged\n", exclusive, rounds, c.rewrites)
	for _, r := range c.report {
		GinkgoWriter.Printf("%s: %d samples, longest interval between samples %s, %d without the entry (longest gap %s), %d not valid JSON\n",
			r.node, r.samples, r.maxInterval, r.missing, r.longestGap, r.invalid)
		AddReportEntry("chain samples "+r.node, fmt.Sprintf("%d samples, %d missing, longest gap %s, %d invalid", r.samples, r.missing, r.longestGap, r.invalid))
	}

	By("every pod of every phase runs, and whether its traffic reaches its proxy")
	c.perPhase = map[string]int{}
	names := make([]string, len(created))
	for i, p := range created {
		names[i] = p.name
	}
	waitAllRunning(ctx, ns, names, testenv.Scale(ciliumStartBound))
	for _, p := range created {
		if meshedOutbound(ns, p.name, peer.Status.PodIP) {
			c.perPhase[p.phase]++
		} else {
			c.unredirected = append(c.unredirected, p.name+" ("+p.phase+")")
		}
	}
	AddReportEntry("pods created and redirected per phase", c.perPhase)
	GinkgoWriter.Printf("pods created and redirected per phase: %v; unredirected: %v; sandbox attempts Cilium failed (its agent restarting or its API's 429), retried by the kubelet: %d\n",
		c.perPhase, c.unredirected, sandboxFailures(ctx, ns, "v-"))
	return c
}

// Each Cilium agent start rewrites 05-cilium.conflist from its template,
// without the chain entry; with cni.exclusive it does so again on every
// change in the conf dir. Both settings, one after the other, on one
// cluster; the installed one is put back for the specs that follow.
var _ = Describe("Cilium as the primary, its agents restarted under pod churn", Serial, Ordered, Label("cilium"), func() {
	BeforeAll(func(ctx SpecContext) {
		if env.Primary != primaryCilium {
			Skip("Cilium is not the primary (E2E_PRIMARY=cilium)")
		}
		installed := ciliumExclusive(ctx)
		DeferCleanup(func(ctx SpecContext) {
			if ciliumExclusive(ctx) != installed {
				setCiliumExclusive(ctx, installed)
				restartCilium(ctx)
			}
		})
	})

	It("with cni.exclusive=false chains again after every rewrite, and every pod created meanwhile starts redirected", func(ctx SpecContext) {
		rounds, err := strconv.Atoi(getenv("E2E_CILIUM_RESTARTS", "3"))
		Expect(err).NotTo(HaveOccurred(), "E2E_CILIUM_RESTARTS")
		setCiliumExclusive(ctx, false)
		c := churnCilium(ctx, rounds)
		Expect(c.unredirected).To(BeEmpty(), "pods that started without the redirect")
		for _, ph := range c.phases {
			Expect(c.perPhase[ph]).To(BeNumerically(">=", 1), "no pod was created during %q", ph)
		}
		for _, r := range c.report {
			Expect(r.samples).To(BeNumerically(">", 10), "%s: too few samples", r.node)
			Expect(r.invalid).To(BeZero(), "%s: the conflist was not valid JSON at some sample", r.node)
		}
	})

	// One restart round: it applies the setting, and from then on the two
	// agents rewrite each other without end, restarts or not.
	It("with cni.exclusive=true fights mesh-cni without end, which check refuses", func(ctx SpecContext) {
		setCiliumExclusive(ctx, true)
		c := churnCilium(ctx, 1)
		exclusiveRefused(ctx, schedulableNodes(ctx), c.agentWrites)
	})
})

// exclusiveRefused is the cni.exclusive=true outcome, measured: Cilium
// rewrites its conflist on every change in the conf dir, mesh-cni's re-chain
// is such a change, and the two rewrite each other without end. Pods whose
// network is set up while Cilium's version is on disk start unredirected;
// how many depends on when the runtime reads the file (11 of 15 on a quiet
// machine, none of 16 under heavy load, when the runtime's reads lag behind
// both writes), so that count is reported, not asserted. What is asserted
// holds at any speed: every agent rewrote its conflist after the one write
// of its start, i.e. on a change it did not make. So that setting is
// refused rather than supported: `mesh-cnictl check` fails naming the fix,
// and the agents say so on their Node in a Warning Event. Should a Cilium
// release stop rewriting on changes, the first assertion fails and the
// refusal (internal/ctl/check/cilium.go) is to be revisited.
func exclusiveRefused(ctx context.Context, nodes []string, agentWrites []int) {
	Expect(agentWrites).NotTo(BeEmpty())
	for _, n := range agentWrites {
		Expect(n).To(BeNumerically(">", 1),
			"a Cilium agent with cni.exclusive=true wrote its conflist only at its start: revisit check's refusal of it")
	}
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
