package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/version"
)

// timedExec is libcni's plugin exec with a stopwatch around each plugin
// process, so a chain's ADD or DEL splits into the primary's process, the
// chained plugin's process and libcni's own work around them.
type timedExec struct {
	raw invoke.RawExec
	mu  sync.Mutex
	// procs holds each process's time by "<binary> <verb>", in call order.
	procs map[string][]time.Duration
}

func newTimedExec() *timedExec {
	return &timedExec{procs: map[string][]time.Duration{}}
}

func (t *timedExec) ExecPlugin(ctx context.Context, path string, stdin []byte, env []string) ([]byte, error) {
	verb := ""
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "CNI_COMMAND="); ok {
			verb = v
		}
	}
	start := time.Now()
	out, err := t.raw.ExecPlugin(ctx, path, stdin, env)
	d := time.Since(start)
	t.mu.Lock()
	key := filepath.Base(path) + " " + verb
	t.procs[key] = append(t.procs[key], d)
	t.mu.Unlock()
	return out, err
}

func (t *timedExec) FindInPath(plugin string, paths []string) (string, error) {
	return invoke.FindInPath(plugin, paths)
}

func (t *timedExec) Decode(b []byte) (version.PluginInfo, error) {
	var d version.PluginDecoder
	return d.Decode(b)
}

// proc is the p50 of one plugin's process for verb ("ADD", "DEL"), in ms;
// false when it never ran.
func (r *result) proc(binary, verb string) (float64, bool) {
	if r.exec == nil {
		return 0, false
	}
	r.exec.mu.Lock()
	ds := r.exec.procs[binary+" "+verb]
	r.exec.mu.Unlock()
	if len(ds) == 0 {
		return 0, false
	}
	return ms(pct(ds, 50)), true
}

// splitTable breaks the serial shape's DEL and ADD p50 into processes: the
// primary's (ptp, host-local included), the chained plugin's own, and what
// is left (libcni: config, cache, result parsing). A chain's "added" time
// over ptp alone is its plugin's process plus any change in the primary's
// own process when it runs in that chain.
func splitTable(results [][]result, chains []chain, r run) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### Where the serial time goes\n\n")
	fmt.Fprintf(&b, "Each plugin process timed on its own (libcni's exec, wrapped in a stopwatch), p50 over the %s shape; `ptp` includes\n", r.name)
	fmt.Fprintf(&b, "its `host-local` child. \"primary vs alone\" is ptp's own process in that chain minus ptp's in the ptp-only chain:\n")
	fmt.Fprintf(&b, "the time the chained plugin costs the primary, or just when it runs (ptp's DEL runs after the chained plugin's).\n")
	fmt.Fprintf(&b, "\"libcni\" is the chain's p50 less the processes' p50s: config, cache and result handling around them.\n\n")
	b.WriteString("| chain | ptp ADD | plugin ADD | libcni ADD | ptp DEL | plugin DEL | libcni DEL | primary vs alone, ADD | primary vs alone, DEL |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	dash := func(v []float64, format string) string {
		if len(v) == 0 {
			return "–"
		}
		return span(v, format)
	}
	for _, c := range chains {
		typ, _ := c.plugin["type"].(string)
		// libcni is the chain's whole time less its processes.
		libcni := func(verb string, whole func(figures) float64) []float64 {
			return over(results, func(rs []result) (float64, bool) {
				res := find(rs, c.name, r.name)
				if res == nil {
					return 0, false
				}
				p, _ := res.proc("ptp", verb)
				x, _ := res.proc(typ, verb)
				return whole(of(res)) - p - x, true
			})
		}
		var vsAdd, vsDel []float64
		if c.plugin != nil {
			vsAdd, vsDel = primaryShift(results, c.name, r.name, "ADD"), primaryShift(results, c.name, r.name, "DEL")
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c.name,
			dash(procOf(results, c.name, r.name, "ptp", "ADD"), "%.2f ms"), dash(procOf(results, c.name, r.name, typ, "ADD"), "%.2f ms"),
			dash(libcni("ADD", fAdd50), "%.2f ms"),
			dash(procOf(results, c.name, r.name, "ptp", "DEL"), "%.2f ms"), dash(procOf(results, c.name, r.name, typ, "DEL"), "%.2f ms"),
			dash(libcni("DEL", fDel50), "%.2f ms"),
			dash(vsAdd, "%+.2f ms"), dash(vsDel, "%+.2f ms"))
	}
	b.WriteString("\n")
	return b.String()
}

// procOf is one plugin's process p50 in chain and run, per repetition.
func procOf(results [][]result, chain, run, binary, verb string) []float64 {
	return over(results, func(rs []result) (float64, bool) {
		if r := find(rs, chain, run); r != nil {
			return r.proc(binary, verb)
		}
		return 0, false
	})
}

// primaryShift is ptp's own process p50 in chain minus ptp's in the
// ptp-only chain, per repetition.
func primaryShift(results [][]result, chain, run, verb string) []float64 {
	return over(results, func(rs []result) (float64, bool) {
		r, alone := find(rs, chain, run), find(rs, "ptp", run)
		if r == nil || alone == nil {
			return 0, false
		}
		in, ok1 := r.proc("ptp", verb)
		out, ok2 := alone.proc("ptp", verb)
		return in - out, ok1 && ok2
	})
}
