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
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"

	"github.com/mesh-cni/mesh-cni/internal/agent"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
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

func main() {
	pluginBin := flag.String("plugin", "bin/mesh-cni", "mesh-cni binary")
	naiveBin := flag.String("naive", "bin/naive-cni", "exec-per-rule baseline plugin binary")
	nullBin := flag.String("null", "bin/null-cni", "do-nothing Go plugin binary (the floor of any exec'd Go plugin)")
	istioBin := flag.String("istio-cni", "", "Istio's istio-cni plugin binary (default: built or found by hack/build-istio.sh)")
	k8sBins := flag.String("k8s-bins", "", "directory with etcd and kube-apiserver (default: internal/testsupport/testenv's, built when missing)")
	podFile := flag.String("pod", "internal/testsupport/contract/testdata/istio/default.yaml", "the pod as Istio's injector wrote it; every bench pod is a copy")
	only := flag.String("only", "", "comma-separated: run only the chains whose name contains one of these (quick comparisons)")
	out := flag.String("out", "", "write the markdown report here (default: stdout)")
	scale := flag.Float64("scale", 1, "multiply pod counts (quick runs: 0.1)")
	serialOnly := flag.Bool("serial", false, "run only the serial shape (quick comparisons)")
	reps := flag.Int("runs", 1, "repeat every shape this many times; the report gives each figure's range over the runs")
	flag.Parse()
	if os.Geteuid() != 0 {
		fail("needs root (network namespaces, netfilter)")
	}
	if *k8sBins != "" {
		os.Setenv("MESH_CNI_K8S_BIN_DIR", *k8sBins)
	}
	work, err := os.MkdirTemp("", "mesh-cni-bench-")
	if err != nil {
		fail(err.Error())
	}
	cleanups = append(cleanups, func() { os.RemoveAll(work) })
	binDir, istioRun := filepath.Join(work, "bin"), filepath.Join(work, "istio-run")
	kubeconfig := filepath.Join(work, "kubeconfig.json")
	for _, d := range []string{binDir, istioRun} {
		if err := os.Mkdir(d, 0o755); err != nil {
			fail(err.Error())
		}
	}
	pod, err := loadPod(*podFile)
	if err != nil {
		fail(err.Error())
	}
	annotations := runtimeAnnotations(pod)

	// From the runtime's annotations: the istio profile judges from the
	// spec by default (trustAnnotations false: one lookup confirms the pod);
	// trusting the annotations makes them decide alone, with no lookup.
	// The agent's own report reader, as on a node: it takes each verb's
	// event and closes the nf_tables sockets it carries (plugin/README.md).
	// The "no agent" row has nobody listening: the plugin closes them.
	reportSocket := filepath.Join(work, "report.sock")
	go func() {
		if err := agent.ServeReports(context.Background(), reportSocket, slog.New(slog.DiscardHandler)); err != nil {
			fail(err.Error())
		}
	}()
	meshWith := func(backend, report string) map[string]any {
		return map[string]any{
			"type": "mesh-cni", "backend": backend, "logLevel": "error",
			"capabilities": map[string]bool{"io.kubernetes.cri.pod-annotations": true},
			"reportSocket": report,
			"meshes":       map[string]any{"istio": map[string]any{"trustAnnotations": true}},
		}
	}
	mesh := func(backend string) map[string]any { return meshWith(backend, reportSocket) }
	// API lookup: no pod-annotations capability, so the runtime passes no
	// annotations; the agent socket does not exist, so the lookup falls
	// through to one GET through the kubeconfig.
	lookup := map[string]any{
		"type": "mesh-cni", "backend": "nftables", "logLevel": "error",
		"reportSocket": reportSocket, "agentSocket": noAgentSocket, "kubeconfig": kubeconfig,
	}
	chains := []chain{
		{name: "ptp"},
		{name: nullChain, plugin: map[string]any{"type": "null-cni"}},
		{name: meshNft, plugin: mesh("nftables"), check: checkMeshNft},
		{name: meshIptNft, plugin: mesh("iptables-nft"), check: checkMeshIptNft},
		{name: meshIptLegacy, plugin: mesh("iptables-legacy"), check: checkMeshIptLegacy},
		{name: meshNoAgent, plugin: meshWith("nftables", noReportSocket), check: checkMeshNft},
		{name: meshLookup, plugin: lookup, api: true, check: checkMeshNft},
		{name: istioIptables, plugin: istioEntry(istioRun, false), api: true, check: checkIstioIpt},
		{name: istioNftables, plugin: istioEntry(istioRun, true), api: true, check: checkIstioNft},
		{name: "ptp + naive exec-per-rule (iptables-nft)", plugin: map[string]any{"type": "naive-cni",
			"capabilities": map[string]bool{"io.kubernetes.cri.pod-annotations": true}}, check: checkNaive},
	}
	if *only != "" {
		chains = slices.DeleteFunc(chains, func(c chain) bool {
			return c.plugin != nil && !slices.ContainsFunc(strings.Split(*only, ","), func(s string) bool { return strings.Contains(c.name, s) })
		})
	}
	bins := map[string]string{"mesh-cni": *pluginBin, "naive-cni": *naiveBin, "null-cni": *nullBin}
	if slices.ContainsFunc(chains, func(c chain) bool { return c.plugin != nil && c.plugin["type"] == "istio-cni" }) {
		if bins["istio-cni"], err = findIstioCNI(*istioBin); err != nil {
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
	n := func(x int) int { return max(8, int(float64(x)**scale)) }
	runs := []run{
		{name: fmt.Sprintf("%d pods serial", n(200)), pods: n(200), conc: 1},
		{name: fmt.Sprintf("%d pods, 8 concurrent", n(200)), pods: n(200), conc: 8},
		{name: fmt.Sprintf("%d-pod burst, 32 concurrent", n(110)), pods: n(110), conc: 32, burst: true},
	}
	if *serialOnly {
		runs = runs[:1]
	}
	if slices.ContainsFunc(chains, func(c chain) bool { return c.api }) {
		maxPods := 0
		for _, r := range runs {
			maxPods = max(maxPods, r.pods)
		}
		cl, err := startCluster(pod, maxPods)
		if err != nil {
			fail("API server: " + err.Error())
		}
		cleanups = append(cleanups, cl.stop)
		if err := writeJSONKubeconfig(cl.env, kubeconfig); err != nil {
			fail(err.Error())
		}
		if err := os.Symlink(kubeconfig, filepath.Join(istioRun, istioKubeconfigName)); err != nil {
			fail(err.Error())
		}
	}
	// Before any timing: each chain that writes rules must really have
	// written them (and, where its DEL removes them, removed them).
	for i, c := range chains {
		if err := probe(binDir, c, i, annotations); err != nil {
			fail("rule check: " + err.Error())
		}
		if c.check != nil {
			fmt.Fprintf(os.Stderr, "rule check passed: %s\n", c.name)
		}
	}

	show := func(res result, r run) {
		fmt.Fprintf(os.Stderr, "%-45s %-28s ADD p50 %6.2f p99 %6.2f  DEL p50 %6.2f p99 %6.2f ms  errors %d\n",
			res.chain, r.name, ms(pct(res.add, 50)), ms(pct(res.add, 99)), ms(pct(res.del, 50)), ms(pct(res.del, 99)), res.errs)
	}
	var results [][]result // per repetition
	for rep := range max(1, *reps) {
		fmt.Fprintf(os.Stderr, "run %d of %d\n", rep+1, max(1, *reps))
		var rs []result
		for _, r := range runs {
			if r.conc == 1 {
				for _, res := range interleaved(binDir, chains, r, annotations) {
					show(res, r)
					rs = append(rs, res)
				}
				continue
			}
			// ptp alone first and last in each concurrent shape, to see drift.
			order := append(slices.Clone(chains), chains[0])
			for i, c := range order {
				res := measure(binDir, c, r, i, annotations)
				if i == len(order)-1 {
					res.chain = "ptp (again)"
				}
				show(res, r)
				rs = append(rs, res)
			}
		}
		results = append(results, rs)
	}
	report := render(results, runs, chains, *pluginBin, bins["istio-cni"])
	if *out == "" {
		fmt.Print(report)
	} else if err := writeSection(*out, report); err != nil {
		fail(err.Error())
	}
	exit(0)
}

// conflist is c after ptp + host-local on subnet.
func conflist(c chain, name, subnet, dataDir string) *libcni.NetworkConfigList {
	plugins := []any{map[string]any{"type": "ptp", "ipMasq": false, "ipam": map[string]any{
		"type": "host-local", "ranges": []any{[]any{map[string]any{"subnet": subnet}}},
		"dataDir": dataDir,
	}}}
	if c.plugin != nil {
		plugins = append(plugins, c.plugin)
	}
	b, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": name, "plugins": plugins})
	list, err := libcni.NetworkConfFromBytes(b)
	if err != nil {
		fail(err.Error())
	}
	return list
}

// runtimeConf is what a CRI runtime passes for pod name of the bench
// namespace; libcni hands the annotations only to entries that ask for the
// io.kubernetes.cri.pod-annotations capability.
func runtimeConf(id, netns, pod string, annotations map[string]string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: id, NetNS: netns, IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", benchNamespace},
			{"K8S_POD_NAME", pod}, {"K8S_POD_INFRA_CONTAINER_ID", id}},
		CapabilityArgs: map[string]any{"io.kubernetes.cri.pod-annotations": annotations},
	}
}

// bed is one chain ready to run: its conflist, libcni and one netns and
// runtime config per pod, made before any timing.
type bed struct {
	res      *result
	add, del func(i int)
	close    func()
}

func newBed(binDir string, c chain, r run, idx int, annotations map[string]string) *bed {
	var cleanup []func()
	dataDir, err := os.MkdirTemp("", "mesh-cni-bench-ipam-")
	if err != nil {
		fail(err.Error())
	}
	cleanup = append(cleanup, func() { os.RemoveAll(dataDir) })
	list := conflist(c, fmt.Sprintf("bench%d", idx), fmt.Sprintf("198.19.%d.0/24", idx), dataDir)
	cacheDir, _ := os.MkdirTemp("", "mesh-cni-bench-cache-")
	cleanup = append(cleanup, func() { os.RemoveAll(cacheDir) })
	exec := newTimedExec()
	cni := libcni.NewCNIConfigWithCacheDir([]string{binDir, refPlugins}, cacheDir, exec)

	netnss := make([]ns.NetNS, r.pods)
	for i := range netnss {
		if netnss[i], err = testutils.NewNS(); err != nil {
			fail(err.Error())
		}
	}
	cleanup = append(cleanup, func() {
		for _, n := range netnss {
			_ = testenv.RemoveNS(n)
		}
	})
	rts := make([]*libcni.RuntimeConf, r.pods)
	for i := range rts {
		rts[i] = runtimeConf(fmt.Sprintf("bench%02d%06d", idx, i), netnss[i].Path(), podName(i), annotations)
	}
	res := &result{chain: c.name, run: r.name, add: make([]time.Duration, r.pods), del: make([]time.Duration, r.pods), exec: exec}
	var mu sync.Mutex
	timed := func(dst []time.Duration, i int, f func() error) {
		start := time.Now()
		err := f()
		dst[i] = time.Since(start)
		if err != nil {
			mu.Lock()
			res.errs++
			if res.errs == 1 {
				fmt.Fprintf(os.Stderr, "%s: %v\n", c.name, err)
			}
			mu.Unlock()
		}
	}
	ctx := context.Background()
	return &bed{
		res: res,
		add: func(i int) {
			timed(res.add, i, func() error { _, err := cni.AddNetworkList(ctx, list, rts[i]); return err })
		},
		del: func(i int) { timed(res.del, i, func() error { return cni.DelNetworkList(ctx, list, rts[i]) }) },
		close: func() {
			for _, f := range cleanup {
				f()
			}
		},
	}
}

// measure runs one chain alone in a concurrent shape.
func measure(binDir string, c chain, r run, idx int, annotations map[string]string) result {
	b := newBed(binDir, c, r, idx, annotations)
	defer b.close()
	start := time.Now()
	if r.burst {
		parallel(r.pods, r.conc, b.add)
		parallel(r.pods, r.conc, b.del)
	} else {
		parallel(r.pods, r.conc, func(i int) { b.add(i); b.del(i) })
	}
	b.res.wall = time.Since(start)
	return *b.res
}

// interleaved runs the serial shape for every chain at once, pod by pod in
// turn, so load that comes and goes on the machine hits every chain alike.
func interleaved(binDir string, chains []chain, r run, annotations map[string]string) []result {
	beds := make([]*bed, len(chains))
	for i, c := range chains {
		beds[i] = newBed(binDir, c, r, i, annotations)
	}
	for p := 0; p < r.pods; p++ {
		for _, b := range beds {
			start := time.Now()
			b.add(p)
			b.del(p)
			b.res.wall += time.Since(start)
		}
	}
	out := make([]result, len(beds))
	for i, b := range beds {
		b.close()
		out[i] = *b.res
	}
	return out
}

// parallel calls f(0..n-1) from conc workers.
func parallel(n, conc int, f func(int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
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
