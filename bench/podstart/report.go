package podstart

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/mesh-cni/mesh-cni/bench/internal/docsection"
)

// The chains the benchmark compares: flannel alone (the baseline, so the
// CNI share shows), flannel + Istio's istio-cni, flannel + mesh-cni.
const (
	Baseline = "flannel alone"
	Istio    = "istio-cni"
	Mesh     = "mesh-cni"
)

// Chains is the order of the first round (Plan reverses every other one).
var Chains = []string{Istio, Baseline, Mesh}

// sectionName names this benchmark's section of docs/benchmarks.md; the
// other benchmarks keep their own sections in the same file.
const sectionName = "bench-cluster"

// Sample is one pod's start.
type Sample struct {
	Round int
	// Local: from just before the create call to the watch's delivery of
	// the pod with Ready=True, both on this host's monotonic clock.
	Local time.Duration
	// Server: creationTimestamp to the Ready condition's
	// lastTransitionTime, as the API server and kubelet stamped them
	// (whole seconds).
	Server time.Duration
}

// Result is what one chain measured over the run.
type Result struct {
	Chain   string
	Samples []Sample
	// Verified pods were checked redirected (or, for the baseline, not);
	// Failed of them were not as expected.
	Verified, Failed int
	// SandboxFailures are FailedCreatePodSandBox events of its pods.
	SandboxFailures int
}

func (r Result) local() []time.Duration {
	d := make([]time.Duration, len(r.Samples))
	for i, s := range r.Samples {
		d[i] = s.Local
	}
	return d
}

func (r Result) server() []time.Duration {
	d := make([]time.Duration, len(r.Samples))
	for i, s := range r.Samples {
		d[i] = s.Server
	}
	return d
}

func (r Result) round(n int) []time.Duration {
	var d []time.Duration
	for _, s := range r.Samples {
		if s.Round == n {
			d = append(d, s.Local)
		}
	}
	return d
}

// Run is the whole measurement and where it ran.
type Run struct {
	Host, Kubernetes, Istio   string
	CPUs, Nodes               int
	At                        time.Time
	LoadBefore, LoadAfter     string
	PerNode, Rounds, InFlight int
	Elapsed                   time.Duration
	Results                   []Result
}

func (r Run) result(chain string) (Result, bool) {
	for _, x := range r.Results {
		if x.Chain == chain {
			return x, true
		}
	}
	return Result{}, false
}

// Ratios are mesh-cni ÷ istio-cni of p50 and p99 (NaN when either is missing).
func (r Run) Ratios() (p50, p99 float64) {
	m, okM := r.result(Mesh)
	i, okI := r.result(Istio)
	if !okM || !okI {
		return math.NaN(), math.NaN()
	}
	sm, si := Summarize(m.local()), Summarize(i.local())
	return Ratio(sm.P50, si.P50), Ratio(sm.P99, si.P99)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

// Render is the section's Markdown (without the markers).
func (r Run) Render() string {
	var b strings.Builder
	b.WriteString("## Pod start on a kind cluster: istio-cni and mesh-cni\n\n")
	fmt.Fprintf(&b, "Measured by `make bench-cluster` (the e2e spec labelled `bench`, `e2e/bench_test.go`) on %s, %s, %d CPUs; "+
		"load average before the run: %s, after: %s. Run time %s.\n\n",
		r.Host, r.At.UTC().Format("2006-01-02 15:04 UTC"), r.CPUs, r.LoadBefore, r.LoadAfter, r.Elapsed.Round(time.Second))
	fmt.Fprintf(&b, "One kind cluster (`kind-configs/flannel.yaml`, Kubernetes %s, %d nodes taking pods), flannel as the primary CNI, "+
		"and three chains on it in turn: flannel alone; flannel + Istio's own CNI (istio.io/istio %s, installed with Istio's "+
		"`istio-cni` chart and its `install-cni` image as the `migrate` spec does); flannel + mesh-cni (this checkout's chart). "+
		"Between batches one plugin is uninstalled and the other installed (a clean install, not the takeover: every batch "+
		"measures a chain as it runs once installed, and the state between the two plugins is the baseline; mesh-cni's "+
		"DaemonSet is deleted in the foreground before `helm uninstall`, as docs/upgrade.md allows). After each switch one pod "+
		"per node starts, not counted, while the new node agents settle. "+
		"The batches are interleaved in %d rounds, the order reversed every other round (%s, then back), "+
		"%d pods per node per chain in all; on each node %d pods are starting at a time.\n\n",
		r.Kubernetes, r.Nodes, r.Istio, r.Rounds, strings.Join(Chains, ", "), r.PerNode, r.InFlight)
	b.WriteString("Every pod is the suite's Istio-contract pod (the injector's `sidecar.istio.io/status` annotation, an `istio-proxy` " +
		"container as UID 1337 and an app container, both the test proxy; `restricted` Pod Security, no init container, no " +
		"probe), so both plugins redirect it. **Ready** here is the pod's `Ready` condition: scheduling, the sandbox with the " +
		"whole CNI chain's ADD (flannel, then the mesh plugin writing the redirect; istio-cni GETs the pod from the API " +
		"server, mesh-cni decides from the annotations the runtime passes and confirms them with one lookup in its node agent's " +
		"pod cache, the Istio profile's default), both containers created and started (images present), " +
		"the kubelet's status write, and the watch delivering it. The time is taken on this host: from just before the create " +
		"call to the informer's delivery of the pod with `Ready=True` (monotonic clock). The API server's own stamps " +
		"(creationTimestamp → the condition's lastTransitionTime, whole seconds) are given next to it as a check. " +
		"Every 10th pod of each batch is checked before its batch is deleted: its netns (found on the node by the pod's IP) " +
		"holds the rules of the chain's plugin only (`ISTIO_*` or `MESH_*`; none under flannel alone), and its app's " +
		"connection reaches the proxy on 15001 with the original destination (under flannel alone: the peer itself). " +
		"The run stops if one is not.\n\n")
	r.renderResults(&b)
	r.renderRounds(&b)
	b.WriteString("\nFigures are from this machine and this run; they are not asserted anywhere.\n")
	return b.String()
}

// renderResults writes the busy-machine warning, the table per chain and
// the ratios.
func (r Run) renderResults(b *strings.Builder) {
	if l := strings.Fields(r.LoadBefore); len(l) > 0 {
		var avg float64
		_, _ = fmt.Sscan(l[0], &avg) // unreadable: 0, no warning
		if avg > float64(r.CPUs) {
			fmt.Fprintf(b, "**The machine was shared with other work (load average %.1f on %d CPUs at the start).** "+
				"Absolute times are this machine's under that load; only the ratios, measured interleaved in one run, compare.\n\n", avg, r.CPUs)
		}
	}
	b.WriteString("| chain | pods | p50 | p99 | max | p50 / p99 (API stamps) | checked | not as expected | sandbox failures |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range Chains {
		res, ok := r.result(c)
		if !ok {
			continue
		}
		s, srv := Summarize(res.local()), Summarize(res.server())
		fmt.Fprintf(b, "| %s | %d | %s | %s | %s | %s / %s | %d | %d | %d |\n", c, s.N, ms(s.P50), ms(s.P99), ms(s.Max),
			ms(srv.P50), ms(srv.P99), res.Verified, res.Failed, res.SandboxFailures)
	}
	p50, p99 := r.Ratios()
	fmt.Fprintf(b, "\n**mesh-cni ÷ istio-cni: p50 %.2f, p99 %.2f.**", p50, p99)
	if base, ok := r.result(Baseline); ok && len(base.Samples) > 0 {
		bs := Summarize(base.local())
		var parts []string
		for _, c := range []string{Istio, Mesh} {
			if res, ok := r.result(c); ok {
				s := Summarize(res.local())
				parts = append(parts, fmt.Sprintf("%s %+.0f ms at p50, %+.0f ms at p99", c,
					float64(s.P50-bs.P50)/float64(time.Millisecond), float64(s.P99-bs.P99)/float64(time.Millisecond)))
			}
		}
		fmt.Fprintf(b, " Over flannel alone: %s.", strings.Join(parts, "; "))
	}
	b.WriteString("\n\nThe p99 of one chain is near its largest few values: a load spike during a single batch moves it " +
		"(the rounds below show where), so the p50 is the steadier figure.")
}

// renderRounds writes the p50 of each chain per round.
func (r Run) renderRounds(b *strings.Builder) {
	b.WriteString("\n\np50 per round (drift over the run shows here):\n\n| round |")
	for _, c := range Chains {
		fmt.Fprintf(b, " %s |", c)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(Chains)) + "\n")
	for n := range r.Rounds {
		fmt.Fprintf(b, "| %d |", n+1)
		for _, c := range Chains {
			res, _ := r.result(c)
			d := res.round(n)
			if len(d) == 0 {
				b.WriteString(" n/a |")
				continue
			}
			fmt.Fprintf(b, " %s (%d) |", ms(Percentile(d, 50)), len(d))
		}
		b.WriteString("\n")
	}
}

// WriteSection replaces this benchmark's section of the Markdown file at
// path, or appends it (docsection.Write).
func WriteSection(path, section string) error { return docsection.Write(path, sectionName, section) }
