// Command plugin-bench measures what mesh-cni adds to pod network setup:
// ADD and DEL latency through libcni, chained after Debian's ptp, per
// backend, next to ptp alone, a do-nothing Go plugin, an exec-per-rule
// baseline and Istio's own CNI plugin (istio-cni, iptables and nftables
// modes), all in one run (absolute times drift between runs; the deltas are
// what count). Istio's plugin and mesh-cni's API-lookup mode GET each pod
// from a real kube-apiserver (internal/testsupport/testenv) holding the bench pods.
//
//	go run ./bench/plugin -plugin bin/mesh-cni -naive bin/naive-cni -null bin/null-cni \
//	    -istio-cni "$(bash hack/build-istio.sh istio-cni | tail -n1)/istio-cni" -out docs/benchmarks.md
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/mesh-cni/mesh-cni/bench/internal/docsection"
	"github.com/mesh-cni/mesh-cni/internal/agent"
)

const refPlugins = "/usr/lib/cni"

// Chain names the report refers to.
const (
	nullChain      = "ptp + null Go plugin (floor)"
	meshNft        = "ptp + mesh-cni (nftables)"
	meshIptNft     = "ptp + mesh-cni (iptables-nft)"
	meshIptLegacy  = "ptp + mesh-cni (iptables-legacy)"
	meshLookup     = "ptp + mesh-cni (nftables, API lookup)"
	meshNoAgent    = "ptp + mesh-cni (nftables, no agent)"
	istioIptables  = "ptp + istio-cni (iptables-nft)"
	istioNftables  = "ptp + istio-cni (nftables)"
	noAgentSocket  = "/run/mesh-cni-bench/no-agent.sock"
	noReportSocket = "/run/mesh-cni-bench/none.sock"
)

// chain is one conflist under test.
type chain struct {
	name   string
	plugin map[string]any // the entry after ptp; nil: ptp alone
	api    bool           // the plugin GETs the pod from the API server
	check  *ruleCheck     // what its ADD leaves in the pod's netns; nil: nothing to see
}

// run is one load shape.
type run struct {
	name       string
	pods, conc int
	burst      bool // ADD all, then DEL all; else each worker ADDs then DELs
}

type result struct {
	chain, run string
	add, del   []time.Duration
	wall       time.Duration
	errs       int
	exec       *timedExec // each plugin process's time
}

// cleanups run at exit, also when the benchmark fails.
var cleanups []func()

// options are the command's flags.
type options struct {
	pluginBin, naiveBin, nullBin, istioBin string
	k8sBins, podFile, only, out            string
	scale                                  float64
	serialOnly                             bool
	reps                                   int
}

func parseFlags() options {
	var o options
	flag.StringVar(&o.pluginBin, "plugin", "bin/mesh-cni", "mesh-cni binary")
	flag.StringVar(&o.naiveBin, "naive", "bin/naive-cni", "exec-per-rule baseline plugin binary")
	flag.StringVar(&o.nullBin, "null", "bin/null-cni", "do-nothing Go plugin binary (the floor of any exec'd Go plugin)")
	flag.StringVar(&o.istioBin, "istio-cni", "", "Istio's istio-cni plugin binary (default: built or found by hack/build-istio.sh)")
	flag.StringVar(&o.k8sBins, "k8s-bins", "", "directory with etcd and kube-apiserver (default: internal/testsupport/testenv's, built when missing)")
	flag.StringVar(&o.podFile, "pod", "internal/testsupport/contract/testdata/istio/default.yaml", "the pod as Istio's injector wrote it; every bench pod is a copy")
	flag.StringVar(&o.only, "only", "", "comma-separated: run only the chains whose name contains one of these (quick comparisons)")
	flag.StringVar(&o.out, "out", "", "write the markdown report here (default: stdout)")
	flag.Float64Var(&o.scale, "scale", 1, "multiply pod counts (quick runs: 0.1)")
	flag.BoolVar(&o.serialOnly, "serial", false, "run only the serial shape (quick comparisons)")
	flag.IntVar(&o.reps, "runs", 1, "repeat every shape this many times; the report gives each figure's range over the runs")
	flag.Parse()
	return o
}

// workDir is the run's scratch space, removed at exit.
type workDir struct {
	bin        string // the plugins libcni finds, as symlinks
	istioRun   string // istio-cni's run directory: only its kubeconfig
	kubeconfig string // admin kubeconfig of the bench API server
	reports    string // the report socket of the in-process agent reader
}

func main() {
	o := parseFlags()
	if os.Geteuid() != 0 {
		fail("needs root (network namespaces, netfilter)")
	}
	if o.k8sBins != "" {
		os.Setenv("MESH_CNI_K8S_BIN_DIR", o.k8sBins)
	}
	w := newWorkDir()
	pod, err := loadPod(o.podFile)
	if err != nil {
		fail(err.Error())
	}
	annotations := runtimeAnnotations(pod)
	serveReports(w.reports)
	chains := onlyChains(benchChains(w), o.only)
	bins := linkBins(o, chains, w.bin)
	runs := shapes(o.scale, o.serialOnly)
	if slices.ContainsFunc(chains, func(c chain) bool { return c.api }) {
		startAPI(pod, runs, w)
	}
	checkRules(w.bin, chains, annotations)
	results := runAll(w.bin, chains, runs, annotations, max(1, o.reps))
	report := render(results, runs, chains, o.pluginBin, bins["istio-cni"])
	if o.out == "" {
		fmt.Print(report)
	} else if err := docsection.Write(o.out, sectionName, report); err != nil {
		fail(err.Error())
	}
	exit(0)
}

func newWorkDir() workDir {
	work, err := os.MkdirTemp("", "mesh-cni-bench-")
	if err != nil {
		fail(err.Error())
	}
	cleanups = append(cleanups, func() { os.RemoveAll(work) })
	w := workDir{
		bin: filepath.Join(work, "bin"), istioRun: filepath.Join(work, "istio-run"),
		kubeconfig: filepath.Join(work, "kubeconfig.json"), reports: filepath.Join(work, "report.sock"),
	}
	for _, d := range []string{w.bin, w.istioRun} {
		if err := os.Mkdir(d, 0o755); err != nil {
			fail(err.Error())
		}
	}
	return w
}

// serveReports runs the agent's own report reader, as on a node: it takes
// each verb's event and closes the nf_tables sockets it carries
// (plugin/README.md). The "no agent" row has nobody listening: the plugin
// closes them.
func serveReports(socket string) {
	go func() {
		if err := agent.ServeReports(context.Background(), socket, slog.New(slog.DiscardHandler)); err != nil {
			fail(err.Error())
		}
	}()
}

// benchChains are all the conflists the report compares. From the
// runtime's annotations: the istio profile judges from the spec by default
// (trustAnnotations false: one lookup confirms the pod); trusting the
// annotations makes them decide alone, with no lookup.
func benchChains(w workDir) []chain {
	meshWith := func(backend, report string) map[string]any {
		return map[string]any{
			"type": "mesh-cni", "backend": backend, "logLevel": "error",
			"capabilities": map[string]bool{"io.kubernetes.cri.pod-annotations": true},
			"reportSocket": report,
			"meshes":       map[string]any{"istio": map[string]any{"trustAnnotations": true}},
		}
	}
	mesh := func(backend string) map[string]any { return meshWith(backend, w.reports) }
	// API lookup: no pod-annotations capability, so the runtime passes no
	// annotations; the agent socket does not exist, so the lookup falls
	// through to one GET through the kubeconfig.
	lookup := map[string]any{
		"type": "mesh-cni", "backend": "nftables", "logLevel": "error",
		"reportSocket": w.reports, "agentSocket": noAgentSocket, "kubeconfig": w.kubeconfig,
	}
	return []chain{
		{name: "ptp"},
		{name: nullChain, plugin: map[string]any{"type": "null-cni"}},
		{name: meshNft, plugin: mesh("nftables"), check: checkMeshNft},
		{name: meshIptNft, plugin: mesh("iptables-nft"), check: checkMeshIptNft},
		{name: meshIptLegacy, plugin: mesh("iptables-legacy"), check: checkMeshIptLegacy},
		{name: meshNoAgent, plugin: meshWith("nftables", noReportSocket), check: checkMeshNft},
		{name: meshLookup, plugin: lookup, api: true, check: checkMeshNft},
		{name: istioIptables, plugin: istioEntry(w.istioRun, false), api: true, check: checkIstioIpt},
		{name: istioNftables, plugin: istioEntry(w.istioRun, true), api: true, check: checkIstioNft},
		{name: "ptp + naive exec-per-rule (iptables-nft)", plugin: map[string]any{"type": "naive-cni",
			"capabilities": map[string]bool{"io.kubernetes.cri.pod-annotations": true}}, check: checkNaive},
	}
}

// onlyChains keeps ptp alone and the chains -only names (all when empty).
func onlyChains(chains []chain, only string) []chain {
	if only == "" {
		return chains
	}
	return slices.DeleteFunc(chains, func(c chain) bool {
		return c.plugin != nil && !slices.ContainsFunc(strings.Split(only, ","), func(s string) bool { return strings.Contains(c.name, s) })
	})
}

// linkBins puts every plugin the chains exec into binDir under its CNI type
// name, and returns the sources by that name. istio-cni is found (or built)
// only when a chain uses it.
func linkBins(o options, chains []chain, binDir string) map[string]string {
	bins := map[string]string{"mesh-cni": o.pluginBin, "naive-cni": o.naiveBin, "null-cni": o.nullBin}
	if slices.ContainsFunc(chains, func(c chain) bool { return c.plugin != nil && c.plugin["type"] == "istio-cni" }) {
		var err error
		if bins["istio-cni"], err = findIstioCNI(o.istioBin); err != nil {
			fail(err.Error())
		}
	}
	for name, src := range bins {
		abs, err := filepath.Abs(src)
		if err != nil {
			fail(err.Error())
		}
		if err := os.Symlink(abs, filepath.Join(binDir, name)); err != nil {
			fail(err.Error())
		}
	}
	return bins
}

// shapes are the load shapes, their pod counts scaled (8 pods at least).
func shapes(scale float64, serialOnly bool) []run {
	n := func(x int) int { return max(8, int(float64(x)*scale)) }
	runs := []run{
		{name: fmt.Sprintf("%d pods serial", n(200)), pods: n(200), conc: 1},
		{name: fmt.Sprintf("%d pods, 8 concurrent", n(200)), pods: n(200), conc: 8},
		{name: fmt.Sprintf("%d-pod burst, 32 concurrent", n(110)), pods: n(110), conc: 32, burst: true},
	}
	if serialOnly {
		runs = runs[:1]
	}
	return runs
}

// startAPI starts the API server holding as many bench pods as the largest
// shape needs, and gives its kubeconfig to mesh-cni and istio-cni.
func startAPI(pod *corev1.Pod, runs []run, w workDir) {
	maxPods := 0
	for _, r := range runs {
		maxPods = max(maxPods, r.pods)
	}
	cl, err := startCluster(pod, maxPods)
	if err != nil {
		fail("API server: " + err.Error())
	}
	cleanups = append(cleanups, cl.stop)
	if err := writeJSONKubeconfig(cl.env, w.kubeconfig); err != nil {
		fail(err.Error())
	}
	if err := os.Symlink(w.kubeconfig, filepath.Join(w.istioRun, istioKubeconfigName)); err != nil {
		fail(err.Error())
	}
}

// checkRules runs before any timing: each chain that writes rules must
// really have written them (and, where its DEL removes them, removed them).
func checkRules(binDir string, chains []chain, annotations map[string]string) {
	for i, c := range chains {
		if err := probe(binDir, c, i, annotations); err != nil {
			fail("rule check: " + err.Error())
		}
		if c.check != nil {
			fmt.Fprintf(os.Stderr, "rule check passed: %s\n", c.name)
		}
	}
}

// runAll times every shape reps times and returns the results per
// repetition, each line also shown on stderr as it comes.
func runAll(binDir string, chains []chain, runs []run, annotations map[string]string, reps int) [][]result {
	var results [][]result
	for rep := range reps {
		fmt.Fprintf(os.Stderr, "run %d of %d\n", rep+1, reps)
		var rs []result
		for _, r := range runs {
			rs = append(rs, runShape(binDir, chains, r, annotations)...)
		}
		results = append(results, rs)
	}
	return results
}

// runShape times every chain in one shape: the serial shape interleaved,
// each concurrent shape one chain at a time with ptp alone first and last,
// to see drift.
func runShape(binDir string, chains []chain, r run, annotations map[string]string) []result {
	show := func(res result) {
		fmt.Fprintf(os.Stderr, "%-45s %-28s ADD p50 %6.2f p99 %6.2f  DEL p50 %6.2f p99 %6.2f ms  errors %d\n",
			res.chain, r.name, ms(pct(res.add, 50)), ms(pct(res.add, 99)), ms(pct(res.del, 50)), ms(pct(res.del, 99)), res.errs)
	}
	if r.conc == 1 {
		rs := interleaved(binDir, chains, r, annotations)
		for _, res := range rs {
			show(res)
		}
		return rs
	}
	var rs []result
	order := append(slices.Clone(chains), chains[0])
	for i, c := range order {
		res := measure(binDir, c, r, i, annotations)
		if i == len(order)-1 {
			res.chain = "ptp (again)"
		}
		show(res)
		rs = append(rs, res)
	}
	return rs
}

func pct(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	i := int(float64(len(s)-1) * p / 100)
	return s[i]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func exit(code int) {
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	os.Exit(code)
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "plugin-bench:", msg)
	exit(1)
}
