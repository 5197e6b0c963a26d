//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
)

// Users upgrade from the release they run: the previous release (N-1) and
// this one (N), both published into the registry by their own pipelines
// (hack/e2e-registry.sh), are installed, upgraded, rolled back and upgraded
// again from oci:// while meshed pods keep being created on every node and
// a long-lived meshed client on every node holds one connection throughout.
var _ = Describe("upgrade from the previous release, rollback, upgrade again", Serial, Ordered, Label("upgrade", "versions"), func() {
	It("redirects every pod created in each phase, and no node loses its chain entry", func(ctx SpecContext) {
		if env.Release == nil || env.Install != "helm" {
			Skip("the version upgrade installs from the registry with Helm (E2E_RELEASE, E2E_INSTALL=helm)")
		}
		prevFile := os.Getenv("E2E_PREVIOUS_RELEASE")
		if prevFile == "" {
			Skip("no previous release was published (hack/e2e-registry.sh printed why)")
		}
		prev, cur := readRelease(prevFile), env.Release
		nodeNames := schedulableNodes(ctx)
		_, b := twoNodes(ctx)
		ns := newNamespace(ctx, "e2e-versions")
		peers := startPods(ctx, ns, plainPod("peer", b), streamPeerPod(streamPeer, b))
		peer, streamPeerIP := peers["peer"], peers[streamPeer].Status.PodIP

		By("replacing the suite's release with the previous release " + prev["VERSION"])
		uninstall(ctx)
		DeferCleanup(func(ctx SpecContext) {
			// Whatever happened, the suite goes on with this release.
			installRelease(cur)
			waitDaemonSetReady(ctx, client, 3*time.Minute)
		})
		installRelease(prev)
		waitDaemonSetReady(ctx, client, 3*time.Minute)
		expectReleaseRuns(ctx, prev)
		releaseCheck(prev)

		By("starting a long-lived meshed client on every node, each holding one connection through its proxy")
		streams := startStreams(ctx, ns, streamPeerIP, nodeNames)
		streamed := map[string]streamStatus{}
		expectStreamsAdvanced(ctx, ns, "installed", streams, streamed)

		samplers := startChainSamplers()
		load := startMeshedLoad(ns, nodeNames)

		steps := []struct {
			phase string
			run   func()
			want  map[string]string
		}{
			{"upgrade " + prev["VERSION"] + " → " + cur["VERSION"], func() { installRelease(cur) }, cur},
			{"rollback → " + prev["VERSION"], func() {
				out, err := run(tool("HELM", "helm"), helmArgs("rollback", release, "--namespace", meshNamespace,
					"--wait", "--timeout", timeoutFlag(5*time.Minute))...)
				Expect(err).NotTo(HaveOccurred(), out)
			}, prev},
			{"upgrade again → " + cur["VERSION"], func() { installRelease(cur) }, cur},
		}
		for _, s := range steps {
			By(s.phase)
			load.phase(s.phase)
			s.run()
			waitDaemonSetReady(ctx, client, 3*time.Minute)
			expectReleaseRuns(ctx, s.want)
			releaseCheck(s.want)
			expectStreamsAdvanced(ctx, ns, s.phase, streams, streamed)
		}
		load.phase("settled")
		time.Sleep(3 * time.Second) // pacing: pods of the settled phase too, after the last roll
		created := load.stop()
		report := samplers.stop()

		for _, r := range report {
			GinkgoWriter.Printf("%s: %d samples, longest interval between samples %s, %d without the entry (longest gap %s), %d not valid JSON\n",
				r.node, r.samples, r.maxInterval, r.missing, r.longestGap, r.invalid)
			AddReportEntry("chain samples "+r.node, fmt.Sprintf("%d samples, %d missing, longest gap %s, %d invalid", r.samples, r.missing, r.longestGap, r.invalid))
		}

		By("every long-lived client kept its one redirected connection, without an error or a long gap")
		expectStreamsAdvanced(ctx, ns, "settled", streams, streamed)
		expectStreamsHeld(ctx, ns, streamPeerIP, streams, streamed)

		By("the chain entry was present and the primary's file valid at every sample on every node")
		for _, r := range report {
			Expect(r.samples).To(BeNumerically(">", 10), "%s: too few samples", r.node)
			Expect(r.invalid).To(BeZero(), "%s: the primary's conflist was not valid JSON at some sample", r.node)
			Expect(r.missing).To(BeZero(), "%s: the chain entry was missing for %s", r.node, r.longestGap)
		}

		By("every pod of every phase runs and its traffic reaches its proxy")
		perPhase := map[string]int{}
		for _, p := range created {
			waitRunning(ctx, ns, p.name)
			Expect(meshedOutbound(ns, p.name, peer.Status.PodIP)).To(BeTrue(), "pod %s (%s) started unredirected", p.name, p.phase)
			perPhase[p.phase]++
		}
		AddReportEntry("pods created and redirected per phase", perPhase)
		GinkgoWriter.Printf("pods created and redirected per phase: %v\n", perPhase)
		for _, s := range steps {
			Expect(perPhase[s.phase]).To(BeNumerically(">=", 1), "no pod was created during %q", s.phase)
		}

		By("no pod setup failed other than try-again (code 11) answers")
		events, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedCreatePodSandBox"})
		Expect(err).NotTo(HaveOccurred())
		retries := 0
		for _, e := range events.Items {
			if strings.Contains(e.Message, "cannot judge pod") {
				retries++
				continue
			}
			Expect(e.Message).NotTo(ContainSubstring("mesh-cni"), "pod %s: sandbox failed", e.InvolvedObject.Name)
		}
		GinkgoWriter.Printf("sandbox retries (code 11): %d\n", retries)

	})
})

// installRelease installs or upgrades the suite's release to a release in
// the registry, from its oci:// chart, with the suite's values.
func installRelease(rel map[string]string) {
	args := append([]string{"upgrade", "--install", release}, chartRefOf(rel)...)
	args = append(args, "--namespace", meshNamespace, "--create-namespace",
		"--set", "meshes.kuma.enabled=true", "--set", "meshes.consul.enabled=true",
		"--wait", "--timeout", timeoutFlag(5*time.Minute))
	if rel["VERSION"] == env.Release["VERSION"] {
		// As helmInstall: explain --check needs it (N-1's chart has no podRules).
		args = append(args, "--set", "podRules.enabled=true")
	}
	out, err := run(tool("HELM", "helm"), helmArgs(args...)...)
	Expect(err).NotTo(HaveOccurred(), out)
}

// expectReleaseRuns: the DaemonSet runs rel's image, on every node.
func expectReleaseRuns(ctx context.Context, rel map[string]string) {
	pods, err := client.CoreV1().Pods(meshNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=node-agent"})
	Expect(err).NotTo(HaveOccurred())
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		Expect(p.Spec.Containers[0].Image).To(Equal(releaseImage(rel)), "agent %s", p.Name)
	}
}

// releaseCheck runs that release's own `mesh-cnictl check`: it must be green.
func releaseCheck(rel map[string]string) {
	ctl := filepath.Join(filepath.Dir(os.Getenv("E2E_RELEASE")), "bin", "linux-amd64", "mesh-cnictl")
	if rel["VERSION"] != env.Release["VERSION"] {
		ctl = filepath.Join(filepath.Dir(os.Getenv("E2E_PREVIOUS_RELEASE")), "bin", "linux-amd64", "mesh-cnictl")
	}
	cmd := exec.Command(ctl, "check", "-n", meshNamespace)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig)
	out, err := cmd.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "mesh-cnictl check (%s):\n%s", rel["VERSION"], out)
}

type createdPod struct{ name, phase string }

type meshedLoad struct {
	mu      sync.Mutex
	current string
	created []createdPod
	done    chan struct{}
	wg      sync.WaitGroup
}

func (l *meshedLoad) phase(p string) { l.mu.Lock(); l.current = p; l.mu.Unlock() }

func (l *meshedLoad) stop() []createdPod {
	close(l.done)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.created
}

// startMeshedLoad creates a meshed pod every 1.5 s, on each node in turn,
// and records the phase it was created in.
func startMeshedLoad(ns string, nodeNames []string) *meshedLoad {
	return startLoad(ns, "v", nodeNames, linkerd, 1500*time.Millisecond)
}

// startLoad creates a pod of contract c named <prefix>-<n> every pace, on
// each node in turn, and records the phase it was created in.
func startLoad(ns, prefix string, nodeNames []string, c contract, pace time.Duration) *meshedLoad {
	l := &meshedLoad{current: "installed", done: make(chan struct{})}
	l.wg.Add(1)
	go func() {
		defer GinkgoRecover()
		defer l.wg.Done()
		for i := 0; ; i++ {
			select {
			case <-l.done:
				return
			default:
			}
			p := meshedPod(fmt.Sprintf("%s-%d", prefix, i), nodeNames[i%len(nodeNames)], c, nil)
			l.mu.Lock()
			phase := l.current
			l.mu.Unlock()
			if _, err := client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err == nil {
				l.mu.Lock()
				l.created = append(l.created, createdPod{p.Name, phase})
				l.mu.Unlock()
			}
			select {
			case <-l.done:
				return
			case <-time.After(pace): // the load's pace, not a wait
			}
		}
	}()
	return l
}

// count is how many pods the load created in phase so far.
func (l *meshedLoad) count(phase string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, p := range l.created {
		if p.phase == phase {
			n++
		}
	}
	return n
}

// chainSamplers read each node's primary conflist every 100 ms, from inside
// the node, until stopped.
type chainSamplers struct {
	nodes []nodes.Node
	outs  []*strings.Builder
	wg    sync.WaitGroup
}

const samplerStop = "/tmp/mesh-cni-sampler-stop"

func startChainSamplers() *chainSamplers {
	all, err := provider().ListNodes(env.Cluster)
	Expect(err).NotTo(HaveOccurred())
	s := &chainSamplers{nodes: all}
	for _, n := range all {
		path, _ := primaryConf(n)
		_, _ = nodeExec(n, "rm", "-f", samplerStop)
		out := &strings.Builder{}
		s.outs = append(s.outs, out)
		script := fmt.Sprintf(`while [ ! -e %s ]; do printf '%%s ' "$(date +%%s%%N)"; base64 -w0 %q 2>/dev/null; echo; sleep 0.1; done`, samplerStop, path)
		s.wg.Add(1)
		go func(n nodes.Node) {
			defer GinkgoRecover()
			defer s.wg.Done()
			_ = n.Command("sh", "-c", script).SetStdout(out).Run()
		}(n)
	}
	return s
}

type chainReport struct {
	node                      string
	samples, missing, invalid int
	longestGap, maxInterval   time.Duration
}

func (s *chainSamplers) stop() []chainReport {
	for _, n := range s.nodes {
		out, err := nodeExec(n, "touch", samplerStop)
		Expect(err).NotTo(HaveOccurred(), out)
	}
	s.wg.Wait()
	var reports []chainReport
	for i, n := range s.nodes {
		r := chainReport{node: n.String()}
		// lastOK: the last sample with the entry; a gap runs from it to the next one.
		var last, lastOK int64
		inGap := false
		sc := bufio.NewScanner(strings.NewReader(s.outs[i].String()))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			ts, b64, _ := strings.Cut(sc.Text(), " ")
			at, err := strconv.ParseInt(ts, 10, 64)
			if err != nil {
				continue
			}
			r.samples++
			if last != 0 && time.Duration(at-last) > r.maxInterval {
				r.maxInterval = time.Duration(at - last)
			}
			last = at
			body, _ := base64.StdEncoding.DecodeString(b64)
			ok := false
			if !json.Valid(body) {
				r.invalid++
			} else {
				ok = chainHasMeshCNI(body)
			}
			if !ok {
				r.missing++
				inGap = true
				continue
			}
			if inGap && lastOK != 0 && time.Duration(at-lastOK) > r.longestGap {
				r.longestGap = time.Duration(at - lastOK)
			}
			inGap, lastOK = false, at
		}
		if inGap && lastOK != 0 && time.Duration(last-lastOK) > r.longestGap {
			r.longestGap = time.Duration(last - lastOK)
		}
		reports = append(reports, r)
	}
	return reports
}

func chainHasMeshCNI(conf []byte) bool {
	var c struct {
		Plugins []struct {
			Type string `json:"type"`
		} `json:"plugins"`
	}
	if json.Unmarshal(conf, &c) != nil {
		return false
	}
	for _, p := range c.Plugins {
		if p.Type == "mesh-cni" {
			return true
		}
	}
	return false
}

// createdIn lists the pods the load created in phase.
func (l *meshedLoad) createdIn(phase string) []createdPod {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []createdPod
	for _, p := range l.created {
		if p.phase == phase {
			out = append(out, p)
		}
	}
	return out
}

// forget drops a pod the spec deleted from the load's record.
func (l *meshedLoad) forget(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, p := range l.created {
		if p.name == name {
			l.created = append(l.created[:i], l.created[i+1:]...)
			return
		}
	}
}
