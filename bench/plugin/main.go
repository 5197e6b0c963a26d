// Command plugin-bench measures what mesh-cni adds to pod network setup:
// ADD and DEL latency through libcni, chained after Debian's ptp, per
// backend, next to ptp alone and to an exec-per-rule baseline, all in one
// run (absolute times drift between runs; the deltas are what count).
//
//	go run ./bench/plugin -plugin bin/mesh-cni -naive bin/naive-cni -out docs/benchmarks.md
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
)

const refPlugins = "/usr/lib/cni"

var istioPod = map[string]string{
	"sidecar.istio.io/status": `{"initContainers":null,"containers":["istio-proxy"],"volumes":["istio-envoy"],"imagePullSecrets":null,"revision":"default"}`,
}

const nullChain = "ptp + null Go plugin (floor)"

// chain is one conflist under test.
type chain struct {
	name   string
	plugin map[string]any // the entry after ptp; nil: ptp alone
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
}

func main() {
	pluginBin := flag.String("plugin", "bin/mesh-cni", "mesh-cni binary")
	naiveBin := flag.String("naive", "bin/naive-cni", "exec-per-rule baseline plugin binary")
	nullBin := flag.String("null", "bin/null-cni", "do-nothing Go plugin binary (the floor of any exec'd Go plugin)")
	only := flag.String("only", "", "comma-separated: run only the chains whose name contains one of these (quick comparisons)")
	out := flag.String("out", "", "write the markdown report here (default: stdout)")
	scale := flag.Float64("scale", 1, "multiply pod counts (quick runs: 0.1)")
	serialOnly := flag.Bool("serial", false, "run only the serial shape (quick comparisons)")
	flag.Parse()
	if os.Geteuid() != 0 {
		fail("needs root (network namespaces, netfilter)")
	}
	binDir, err := os.MkdirTemp("", "mesh-cni-bench-")
	if err != nil {
		fail(err.Error())
	}
	defer os.RemoveAll(binDir)
	for name, src := range map[string]string{"mesh-cni": *pluginBin, "naive-cni": *naiveBin, "null-cni": *nullBin} {
		abs, err := filepath.Abs(src)
		if err != nil {
			fail(err.Error())
		}
		if err := os.Symlink(abs, filepath.Join(binDir, name)); err != nil {
			fail(err.Error())
		}
	}
	mesh := func(backend string) map[string]any {
		return map[string]any{
			"type": "mesh-cni", "backend": backend, "logLevel": "error",
			"capabilities": map[string]bool{"io.kubernetes.cri.pod-annotations": true},
			"reportSocket": "/run/mesh-cni-bench/none.sock",
		}
	}
	chains := []chain{
		{name: "ptp"},
		{name: nullChain, plugin: map[string]any{"type": "null-cni"}},
		{name: "ptp + mesh-cni (nftables)", plugin: mesh("nftables")},
		{name: "ptp + mesh-cni (iptables-nft)", plugin: mesh("iptables-nft")},
		{name: "ptp + mesh-cni (iptables-legacy)", plugin: mesh("iptables-legacy")},
		{name: "ptp + naive exec-per-rule (iptables-nft)", plugin: map[string]any{"type": "naive-cni",
			"capabilities": map[string]bool{"io.kubernetes.cri.pod-annotations": true}}},
	}
	if *only != "" {
		chains = slices.DeleteFunc(chains, func(c chain) bool {
			return c.plugin != nil && !slices.ContainsFunc(strings.Split(*only, ","), func(s string) bool { return strings.Contains(c.name, s) })
		})
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
	var results []result
	show := func(res result, r run) {
		fmt.Fprintf(os.Stderr, "%-45s %-28s ADD p50 %6.2f p99 %6.2f  DEL p50 %6.2f p99 %6.2f ms  errors %d\n",
			res.chain, r.name, ms(pct(res.add, 50)), ms(pct(res.add, 99)), ms(pct(res.del, 50)), ms(pct(res.del, 99)), res.errs)
	}
	for _, r := range runs {
		if r.conc == 1 {
			for _, res := range interleaved(binDir, chains, r) {
				show(res, r)
				results = append(results, res)
			}
			continue
		}
		// ptp alone first and last in each concurrent shape, to see drift.
		order := append(slices.Clone(chains), chains[0])
		for i, c := range order {
			res := measure(binDir, c, r, i)
			if i == len(order)-1 {
				res.chain = "ptp (again)"
			}
			fmt.Fprintf(os.Stderr, "%-45s %-28s ADD p50 %6.2f p99 %6.2f  DEL p50 %6.2f p99 %6.2f ms  errors %d\n",
				res.chain, r.name, ms(pct(res.add, 50)), ms(pct(res.add, 99)), ms(pct(res.del, 50)), ms(pct(res.del, 99)), res.errs)
			results = append(results, res)
		}
	}
	report := render(results, runs, *pluginBin)
	if *out == "" {
		fmt.Print(report)
		return
	}
	if err := writeSection(*out, report); err != nil {
		fail(err.Error())
	}
}

// Markers delimit this benchmark's section of the shared benchmarks doc;
// other parts keep their own sections in the same file.
const (
	startMarker = "<!-- bench-plugin:start -->"
	endMarker   = "<!-- bench-plugin:end -->"
)

// writeSection replaces our section of path (or appends it).
func writeSection(path, section string) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	doc := string(old)
	block := startMarker + "\n" + section + endMarker + "\n"
	i, j := strings.Index(doc, startMarker), strings.Index(doc, endMarker)
	switch {
	case i >= 0 && j > i:
		doc = doc[:i] + block + doc[j+len(endMarker):]
		doc = strings.Replace(doc, endMarker+"\n\n", endMarker+"\n", 1)
	case doc == "":
		doc = "# Benchmarks\n\n" + block
	default:
		doc = strings.TrimRight(doc, "\n") + "\n\n" + block
	}
	return os.WriteFile(path, []byte(doc), 0o644)
}

// bed is one chain ready to run: its conflist, libcni and one netns and
// runtime config per pod, made before any timing.
type bed struct {
	res      *result
	add, del func(i int)
	close    func()
}

func newBed(binDir string, c chain, r run, idx int) *bed {
	var cleanup []func()
	dataDir, err := os.MkdirTemp("", "mesh-cni-bench-ipam-")
	if err != nil {
		fail(err.Error())
	}
	cleanup = append(cleanup, func() { os.RemoveAll(dataDir) })
	plugins := []any{map[string]any{"type": "ptp", "ipMasq": false, "ipam": map[string]any{
		"type": "host-local", "ranges": []any{[]any{map[string]any{"subnet": fmt.Sprintf("198.19.%d.0/24", idx)}}},
		"dataDir": dataDir,
	}}}
	if c.plugin != nil {
		plugins = append(plugins, c.plugin)
	}
	b, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": fmt.Sprintf("bench%d", idx), "plugins": plugins})
	list, err := libcni.NetworkConfFromBytes(b)
	if err != nil {
		fail(err.Error())
	}
	cacheDir, _ := os.MkdirTemp("", "mesh-cni-bench-cache-")
	cleanup = append(cleanup, func() { os.RemoveAll(cacheDir) })
	cni := libcni.NewCNIConfigWithCacheDir([]string{binDir, refPlugins}, cacheDir, nil)

	netnss := make([]ns.NetNS, r.pods)
	for i := range netnss {
		if netnss[i], err = testutils.NewNS(); err != nil {
			fail(err.Error())
		}
	}
	cleanup = append(cleanup, func() {
		for _, n := range netnss {
			n.Close()
			_ = testutils.UnmountNS(n)
		}
	})
	rts := make([]*libcni.RuntimeConf, r.pods)
	for i := range rts {
		id := fmt.Sprintf("bench%02d%06d", idx, i)
		rts[i] = &libcni.RuntimeConf{
			ContainerID: id, NetNS: netnss[i].Path(), IfName: "eth0",
			Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "bench"},
				{"K8S_POD_NAME", fmt.Sprintf("pod-%d", i)}, {"K8S_POD_INFRA_CONTAINER_ID", id}},
			CapabilityArgs: map[string]any{"io.kubernetes.cri.pod-annotations": istioPod},
		}
	}
	res := &result{chain: c.name, run: r.name, add: make([]time.Duration, r.pods), del: make([]time.Duration, r.pods)}
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
func measure(binDir string, c chain, r run, idx int) result {
	b := newBed(binDir, c, r, idx)
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
func interleaved(binDir string, chains []chain, r run) []result {
	beds := make([]*bed, len(chains))
	for i, c := range chains {
		beds[i] = newBed(binDir, c, r, i)
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

// startLoad is read when the benchmark starts, before it adds load.
var startLoad, _ = os.ReadFile("/proc/loadavg")

func render(results []result, runs []run, pluginBin string) string {
	var b strings.Builder
	host, _ := os.Hostname()
	size := int64(-1)
	if fi, err := os.Stat(pluginBin); err == nil {
		size = fi.Size()
	}
	fmt.Fprintf(&b, "## CNI plugin (mesh-cni)\n\n")
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(&b, "Measured by `make bench-plugin` (`bench/plugin`) on %s, %s, %d CPUs, %s; load average before the run: %s, at the end: %s (the concurrent shapes load the machine themselves).\n",
		host, time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), runtime.Version(),
		strings.Join(strings.Fields(string(startLoad))[:3], " "), strings.Join(strings.Fields(string(load))[:3], " "))
	fmt.Fprintf(&b, "Each pod is a real netns; ADD and DEL go through libcni with a cniVersion 1.0.0 conflist:\n")
	fmt.Fprintf(&b, "Debian's `ptp` + `host-local`, then the plugin under test; every pod carries Istio's sidecar annotations, so\n")
	fmt.Fprintf(&b, "mesh-cni decides from `runtimeConfig` and writes the full Istio rule set (IPv4). The naive baseline writes the\n")
	fmt.Fprintf(&b, "same rules with one `nsenter iptables` exec per chain and per rule. The serial shape runs every\n")
	fmt.Fprintf(&b, "chain interleaved, pod by pod in turn, so load that comes and goes hits all chains alike (its \"wall\"\n")
	fmt.Fprintf(&b, "is that chain's ADD+DEL time); the concurrent shapes run one chain at a time, ptp alone first and last.\n")
	fmt.Fprintf(&b, "\"added\" is the difference to ptp alone in the same shape (the mean of both ptp runs where there are two).\n")
	fmt.Fprintf(&b, "Figures are from this machine and this run; they are not "+
		"asserted anywhere.\n\n")
	// Other work is judged by the load before the run: at the end the
	// 32-way burst has just driven it up.
	if l := strings.Fields(string(startLoad)); len(l) > 0 {
		var avg float64
		fmt.Sscan(l[0], &avg)
		if avg > float64(runtime.NumCPU()) {
			fmt.Fprintf(&b, "\n**This run shared the machine with other work (load average %.1f on %d CPUs before it started).** Every row\n"+
				"is slowed, unevenly; compare rows within one table, and the two ptp-only rows to see the drift.\n", avg, runtime.NumCPU())
		}
	}
	fmt.Fprintf(&b, "\nPlugin binary (`-s -w`, static): **%.2f MB** (%d bytes; target ≤ 8 MB).\n\n", float64(size)/1e6, size)
	for _, r := range runs {
		fmt.Fprintf(&b, "### %s\n\n", r.name)
		fmt.Fprintf(&b, "| chain | ADD p50 | ADD p99 | DEL p50 | DEL p99 | added ADD p50 | added ADD p99 | wall | errors |\n")
		fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|\n")
		base := baseline(results, r.name)
		for i := range results {
			res := &results[i]
			if res.run != r.name {
				continue
			}
			fmt.Fprintf(&b, "| %s | %.2f ms | %.2f ms | %.2f ms | %.2f ms | %+.2f ms | %+.2f ms | %.1f s | %d |\n",
				res.chain, ms(pct(res.add, 50)), ms(pct(res.add, 99)), ms(pct(res.del, 50)), ms(pct(res.del, 99)),
				ms(pct(res.add, 50))-base.add50, ms(pct(res.add, 99))-base.add99, res.wall.Seconds(), res.errs)
		}
		b.WriteString("\n")
	}
	b.WriteString(targets(results, runs))
	return b.String()
}

// base is the ptp-only reference of one run shape: the mean of the run
// before and the run after the others, so drift during the run is halved.
type base struct{ add50, add99 float64 }

func baseline(results []result, run string) base {
	var b base
	n := 0.0
	for _, r := range results {
		if r.run == run && (r.chain == "ptp" || r.chain == "ptp (again)") {
			b.add50 += ms(pct(r.add, 50))
			b.add99 += ms(pct(r.add, 99))
			n++
		}
	}
	if n > 0 {
		b.add50, b.add99 = b.add50/n, b.add99/n
	}
	return b
}

// targets compares each backend with the goals.
func targets(results []result, runs []run) string {
	find := func(chain, run string) *result {
		for i := range results {
			if results[i].chain == chain && results[i].run == run {
				return &results[i]
			}
		}
		return nil
	}
	var b strings.Builder
	b.WriteString("### Against the targets\n\n")
	ser, burst := runs[0].name, ""
	for _, r := range runs {
		if r.burst {
			burst = r.name
		}
	}
	p := baseline(results, ser)
	floor := find(nullChain, ser)
	if floor != nil {
		fmt.Fprintf(&b, "- The floor: a Go plugin that does nothing but parse its config and print prevResult adds %.2f ms at p50, serial.\n",
			ms(pct(floor.add, 50))-p.add50)
	}
	for _, chainName := range []string{"ptp + mesh-cni (nftables)", "ptp + mesh-cni (iptables-nft)", "ptp + mesh-cni (iptables-legacy)"} {
		m := find(chainName, ser)
		if m == nil {
			continue
		}
		addP50 := ms(pct(m.add, 50)) - p.add50
		fmt.Fprintf(&b, "- %s: serial ADD adds %.2f ms at p50 (target ≤ 4 ms), %.2f ms at p99 (target ≤ 10 ms)",
			chainName, addP50, ms(pct(m.add, 99))-p.add99)
		if floor != nil {
			fmt.Fprintf(&b, ", %.2f ms of it above the floor", ms(pct(m.add, 50))-ms(pct(floor.add, 50)))
		}
		if mb := find(chainName, burst); mb != nil {
			pb := baseline(results, burst)
			fmt.Fprintf(&b, "; the burst's ADD p99 is %+.1f%% over ptp's (target ≤ 25%%)", 100*(ms(pct(mb.add, 99))-pb.add99)/pb.add99)
		}
		b.WriteString(".\n")
	}
	return b.String()
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "plugin-bench:", msg)
	os.Exit(1)
}
