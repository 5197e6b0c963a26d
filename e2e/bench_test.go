//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/mesh-cni/mesh-cni/bench/podstart"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// Pod start time (create → Ready) of meshed pods on one cluster under
// Istio's own CNI, under mesh-cni and under the primary alone, in batches
// interleaved over rounds (bench/podstart plans them and writes the
// report). `make bench-cluster` runs it; it skips unless E2E_BENCH_PODS is
// set. Only ratios from one run mean anything on a shared machine.

const benchBatchLabel = "bench-batch"

var _ = Describe("pod start time under istio-cni and mesh-cni", Serial, Ordered, Label("bench"), func() {
	It("measures create → Ready of meshed pods under each chain, interleaved", func(ctx SpecContext) {
		perNode := benchInt("E2E_BENCH_PODS", 0)
		if perNode == 0 {
			Skip("E2E_BENCH_PODS is not set: make bench-cluster runs this benchmark")
		}
		Expect(env.Install).To(Equal("helm"), "the benchmark installs mesh-cni with Helm")
		images := os.Getenv("E2E_ISTIO_CNI_IMAGES")
		Expect(images).NotTo(BeEmpty(), "E2E_ISTIO_CNI_IMAGES: the tarball of `hack/istio-images.sh cni`")
		rounds := benchInt("E2E_BENCH_ROUNDS", 4)
		inFlight := benchInt("E2E_BENCH_INFLIGHT", 2)
		plan, err := podstart.Plan(podstart.Chains, perNode, rounds)
		Expect(err).NotTo(HaveOccurred())

		start := time.Now()
		loadBefore := loadAverage()
		chart := istioCNIChart()
		tag := istioCNITag(images)
		nodeNames := schedulableNodes(ctx)
		ns := newNamespace(ctx, "e2e-bench")
		peer := startPods(ctx, ns, plainPod("peer", nodeNames[0]))["peer"]
		image := currentAgentImage(ctx)
		version, err := client.Discovery().ServerVersion()
		Expect(err).NotTo(HaveOccurred())

		By("removing the suite's mesh-cni: flannel alone")
		uninstallForeground(ctx)
		current := podstart.Baseline
		DeferCleanup(func(ctx SpecContext) {
			helmUninstallIstioCNI(ctx)
			restorePrimaryAsWritten(ctx)
			helmInstall(image)
			waitDaemonSetReady(ctx, client, 3*time.Minute)
		})
		By("loading Istio's install-cni image (" + filepath.Base(images) + ") into every node")
		loadArchive(env.Cluster, images)
		expectChains(ctx, nil, []string{podstart.Istio, podstart.Mesh})
		By("warming up: 2 pods per node under flannel alone, not counted")
		runBenchBatch(ctx, ns, "w", podstart.Batch{Chain: podstart.Baseline, PerNode: 2}, nodeNames, inFlight)
		deleteBenchBatch(ctx, ns, "w")

		results := map[string]*podstart.Result{}
		for _, c := range podstart.Chains {
			results[c] = &podstart.Result{Chain: c}
		}
		for i, b := range plan {
			id := strconv.Itoa(i)
			if b.Chain != current {
				switchChain(ctx, current, b.Chain, image, chart, tag)
				current = b.Chain
				nodeNames = schedulableNodes(ctx)
				// A freshly started node agent lists and syncs for a while:
				// one pod per node, not counted, before the timed ones.
				runBenchBatch(ctx, ns, "w"+id, podstart.Batch{Chain: b.Chain, PerNode: 1}, nodeNames, 1)
				deleteBenchBatch(ctx, ns, "w"+id)
			}
			By(fmt.Sprintf("batch %d (round %d): %d pods per node under %s", i, b.Round+1, b.PerNode, b.Chain))
			pods := runBenchBatch(ctx, ns, id, b, nodeNames, inFlight)
			res := results[b.Chain]
			var bad []string
			for _, p := range pods {
				res.Samples = append(res.Samples, podstart.Sample{Round: b.Round, Local: p.local, Server: p.server})
				if p.index%10 != 0 {
					continue
				}
				res.Verified++
				if why := benchRedirectProblem(ns, p, b.Chain, peer.Status.PodIP); why != "" {
					res.Failed++
					bad = append(bad, why)
				}
			}
			failures := sandboxFailures(ctx, ns, "b"+id+"-")
			res.SandboxFailures += failures
			Expect(bad).To(BeEmpty(), "pods of batch %d not set up as %s sets them up", i, b.Chain)
			GinkgoWriter.Printf("batch %d: %s p50 %s p99 %s, sandbox failures %d\n", i, b.Chain,
				podstart.Percentile(localOf(pods), 50), podstart.Percentile(localOf(pods), 99), failures)
			deleteBenchBatch(ctx, ns, id)
		}

		report := podstart.Run{
			Kubernetes: version.GitVersion, Istio: istioModuleVersion(), CPUs: runtime.NumCPU(), Nodes: len(nodeNames),
			At: start, LoadBefore: loadBefore, LoadAfter: loadAverage(),
			PerNode: perNode, Rounds: rounds, InFlight: inFlight, Elapsed: time.Since(start),
		}
		report.Host, _ = os.Hostname()
		for _, c := range podstart.Chains {
			report.Results = append(report.Results, *results[c])
		}
		section := report.Render()
		GinkgoWriter.Printf("%s\n", section)
		p50, p99 := report.Ratios()
		AddReportEntry("mesh-cni ÷ istio-cni", fmt.Sprintf("p50 %.2f, p99 %.2f", p50, p99))
		out := getenv("E2E_BENCH_OUT", filepath.Join(repoRoot(), "docs", "benchmarks.md"))
		Expect(podstart.WriteSection(out, section)).To(Succeed())
		GinkgoWriter.Printf("wrote %s\n", out)
	})
})

// benchPod is one measured pod.
type benchPod struct {
	name, node, ip string
	// index within its node's share of the batch: every 10th is verified.
	index         int
	local, server time.Duration
}

func localOf(pods []benchPod) []time.Duration {
	d := make([]time.Duration, len(pods))
	for i, p := range pods {
		d[i] = p.local
	}
	return d
}

// runBenchBatch creates b.PerNode pods with Istio's contract on every node,
// inFlight at a time per node (the next when one is Ready), and times each
// from just before its create call to the moment the watch delivers it
// Ready. The watch is an informer on the batch's label, started (and
// synced) before the first create.
func runBenchBatch(ctx context.Context, ns, id string, b podstart.Batch, nodeNames []string, inFlight int) []benchPod {
	sel := benchBatchLabel + "=" + id
	readyCh := map[string]chan struct{}{}
	for n := range nodeNames {
		for i := range b.PerNode {
			readyCh[benchPodName(id, n, i)] = make(chan struct{})
		}
	}
	var mu sync.Mutex
	readyAt := map[string]time.Time{}
	readyPod := map[string]*corev1.Pod{}
	seen := func(obj any) {
		now := time.Now()
		p, ok := obj.(*corev1.Pod)
		if !ok || !podReady(p) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if _, done := readyAt[p.Name]; done || readyCh[p.Name] == nil {
			return
		}
		readyAt[p.Name], readyPod[p.Name] = now, p
		close(readyCh[p.Name])
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (kruntime.Object, error) {
			o.LabelSelector = sel
			return client.CoreV1().Pods(ns).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel
			return client.CoreV1().Pods(ns).Watch(ctx, o)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, o any) { seen(o) }})
	Expect(err).NotTo(HaveOccurred())
	infCtx, stop := context.WithCancel(ctx)
	defer stop()
	go inf.RunWithContext(infCtx)
	Expect(cache.WaitForNamedCacheSyncWithContext(infCtx, inf.HasSynced)).To(BeTrue(), "the batch's pod watch")

	timeout := testenv.Scale(3 * time.Minute)
	var (
		wg   sync.WaitGroup
		out  []benchPod
		errs []string
	)
	for n, node := range nodeNames {
		queue := make(chan int, b.PerNode)
		for i := range b.PerNode {
			queue <- i
		}
		close(queue)
		for range inFlight {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				for i := range queue {
					mu.Lock()
					failed := len(errs) > 0
					mu.Unlock()
					if failed {
						return
					}
					name := benchPodName(id, n, i)
					p := meshedPod(name, node, istio, nil)
					p.Labels[benchBatchLabel] = id
					t0 := time.Now()
					_, err := client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
					if err == nil {
						select {
						case <-readyCh[name]:
						case <-time.After(timeout):
							err = fmt.Errorf("not Ready after %s: %s", timeout, benchPodProblem(ctx, ns, name))
						case <-ctx.Done():
							err = ctx.Err()
						}
					}
					mu.Lock()
					if err != nil {
						errs = append(errs, fmt.Sprintf("pod %s on %s: %v", name, node, err))
					} else {
						rp := readyPod[name]
						out = append(out, benchPod{
							name: name, node: node, ip: rp.Status.PodIP, index: i,
							local:  readyAt[name].Sub(t0),
							server: readySince(rp).Sub(rp.CreationTimestamp.Time),
						})
					}
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	Expect(errs).To(BeEmpty(), "batch %s under %s", id, b.Chain)
	return out
}

func benchPodName(id string, node, i int) string { return fmt.Sprintf("b%s-n%d-%d", id, node, i) }

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// readySince is the Ready condition's lastTransitionTime (whole seconds).
func readySince(p *corev1.Pod) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

func benchPodProblem(ctx context.Context, ns, name string) string {
	p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	return string(p.Status.Phase) + " " + podProblem(p)
}

// benchRedirectProblem says what is wrong with a pod of a chain ("" when
// nothing): its netns must hold the chain's plugin's rules and no other's,
// and its app's connection must reach the proxy with the original
// destination (under the primary alone: the peer itself, no rules at all).
func benchRedirectProblem(ns string, p benchPod, chain, peerIP string) string {
	want := map[string]rulesOwner{podstart.Istio: ownerIstio, podstart.Mesh: ownerMesh, podstart.Baseline: ownerNone}[chain]
	owner := podRulesOwner(p.node, p.ip)
	if chain == podstart.Baseline {
		r, err := connectEventually(ns, p.name, peerIP)
		if owner != want || err != nil || r.Name != "peer" {
			return fmt.Sprintf("pod %s (node %s) under %s: rules of %s, app traffic answered by %q (%v)", p.name, p.node, chain, owner, r.Name, err)
		}
		return ""
	}
	if redirected := meshedOutboundOnce(ns, p.name, peerIP); owner != want || !redirected {
		return fmt.Sprintf("pod %s (node %s) under %s: rules of %s, app traffic reached the proxy: %t", p.name, p.node, chain, owner, redirected)
	}
	return ""
}

// sandboxFailures counts FailedCreatePodSandBox events of pods named prefix*.
func sandboxFailures(ctx context.Context, ns, prefix string) int {
	events, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedCreatePodSandBox"})
	Expect(err).NotTo(HaveOccurred())
	n := 0
	for _, e := range events.Items {
		if strings.HasPrefix(e.InvolvedObject.Name, prefix) {
			n += max(int(e.Count), 1)
		}
	}
	return n
}

// deleteBenchBatch deletes a batch's pods and waits until they are gone,
// so that no teardown runs while the next batch is timed.
func deleteBenchBatch(ctx context.Context, ns, id string) {
	sel := metav1.ListOptions{LabelSelector: benchBatchLabel + "=" + id}
	Expect(client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, sel)).To(Succeed())
	Eventually(ctx, func() int {
		pods, err := client.CoreV1().Pods(ns).List(ctx, sel)
		Expect(err).NotTo(HaveOccurred())
		return len(pods.Items)
	}).WithTimeout(testenv.Scale(3*time.Minute)).WithPolling(time.Second).Should(BeZero(), "pods of batch %s left", id)
}

// uninstallForeground removes mesh-cni's DaemonSet first, in the
// foreground (docs/upgrade.md), then the rest of the release: each agent
// stops while its DaemonSet, being deleted, and its RBAC are still there,
// so it sees the uninstall at its stop whatever the load.
func uninstallForeground(ctx context.Context) {
	out, err := kubectl("delete", "daemonset", "-n", meshNamespace, daemonSet, "--cascade=foreground",
		"--wait", "--timeout", timeoutFlag(3*time.Minute))
	Expect(err).NotTo(HaveOccurred(), out)
	uninstall(ctx)
}

// switchChain uninstalls the plugin of from and installs that of to (a
// clean install each time), and waits until every node's conflist chains
// exactly it.
func switchChain(ctx context.Context, from, to, image, chart, tag string) {
	if from == to {
		return
	}
	By("switching from " + from + " to " + to)
	switch from {
	case podstart.Istio:
		helmUninstallIstioCNI(ctx)
		restorePrimaryAsWritten(ctx)
	case podstart.Mesh:
		uninstallForeground(ctx)
	}
	switch to {
	case podstart.Istio:
		helmInstallIstioCNI(ctx, chart, tag)
	case podstart.Mesh:
		helmInstall(image)
		waitDaemonSetReady(ctx, client, 3*time.Minute)
	}
	var want, not []string
	for _, p := range []string{podstart.Istio, podstart.Mesh} {
		if p == to {
			want = append(want, p)
		} else {
			not = append(not, p)
		}
	}
	expectChains(ctx, want, not)
}

func benchInt(name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	Expect(err).NotTo(HaveOccurred(), "%s=%q", name, v)
	Expect(n).To(BeNumerically(">", 0), "%s=%q", name, v)
	return n
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// istioModuleVersion is the istio.io/istio version pinned in hack/istio/go.mod.
func istioModuleVersion() string {
	b, err := os.ReadFile(filepath.Join(repoRoot(), "hack", "istio", "go.mod"))
	Expect(err).NotTo(HaveOccurred())
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "istio.io/istio" {
			return f[1]
		}
	}
	return "unknown"
}
