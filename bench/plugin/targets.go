package main

// The verdicts: each backend's figures against the targets, and mesh-cni's
// added time against Istio's plugin.

import (
	"fmt"
	"strings"
)

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

// over collects one figure from every run that has it.
func over(results [][]result, f func(rs []result) (float64, bool)) []float64 {
	var vals []float64
	for _, rs := range results {
		if v, ok := f(rs); ok {
			vals = append(vals, v)
		}
	}
	return vals
}

// verdict judges a target on the median run and says how many runs met it.
func verdict(vals []float64, ok func(float64) bool) string {
	n := 0
	for _, v := range vals {
		if ok(v) {
			n++
		}
	}
	s := met(ok(median(vals)))
	if len(vals) > 1 {
		s += fmt.Sprintf(" (%d of %d runs)", n, len(vals))
	}
	return s
}

// targets compares each backend with the goals, and mesh-cni with Istio's
// plugin.
func targets(results [][]result, runs []run, size int64) string {
	var b strings.Builder
	b.WriteString("### Against the targets\n\n")
	ser, burst := runs[0].name, ""
	for _, r := range runs {
		if r.burst {
			burst = r.name
		}
	}
	// addedBy is what chain adds over ptp in run, per repetition.
	addedBy := func(chain, run string, pick func(figures) float64) []float64 {
		return over(results, func(rs []result) (float64, bool) {
			if m := find(rs, chain, run); m != nil {
				return pick(added(m, baseline(rs, run))), true
			}
			return 0, false
		})
	}
	aboveFloor := func(chain string) []float64 {
		return over(results, func(rs []result) (float64, bool) {
			m, f := find(rs, chain, ser), find(rs, nullChain, ser)
			if m == nil || f == nil {
				return 0, false
			}
			return of(m).add50 - of(f).add50, true
		})
	}
	if floor := addedBy(nullChain, ser, fAdd50); len(floor) > 0 {
		fmt.Fprintf(&b, "- The floor: a Go plugin that does nothing but parse its config and print prevResult adds %s to ADD and %s to DEL at p50, serial.\n",
			span(floor, "%.2f ms"), span(addedBy(nullChain, ser, fDel50), "%.2f ms"))
	}
	fmt.Fprintf(&b, "- Plugin binary %.2f MB (target ≤ 5 MB): %s.\n", float64(size)/1e6, met(size >= 0 && float64(size) <= 5e6))
	for _, chainName := range []string{meshNft, meshIptNft, meshIptLegacy, meshNoAgent, meshLookup} {
		add50 := addedBy(chainName, ser, fAdd50)
		if len(add50) == 0 {
			continue
		}
		del50 := addedBy(chainName, ser, fDel50)
		fmt.Fprintf(&b, "- %s, serial: ADD adds %s at p50 over ptp (target ≤ 5 ms): %s", chainName, span(add50, "%.2f ms"), verdict(add50, func(v float64) bool { return v <= 5 }))
		if above := aboveFloor(chainName); len(above) > 0 {
			fmt.Fprintf(&b, "; %s above the do-nothing Go plugin (target ≤ 1.5 ms): %s", span(above, "%.2f ms"), verdict(above, func(v float64) bool { return v <= 1.5 }))
		}
		fmt.Fprintf(&b, "; ADD p99 adds %s; DEL adds %s at p50 over ptp (target ≤ 5 ms): %s",
			span(addedBy(chainName, ser, fAdd99), "%.2f ms"), span(del50, "%.2f ms"), verdict(del50, func(v float64) bool { return v <= 5 }))
		if own, floor := procOf(results, chainName, ser, "mesh-cni", "DEL"), procOf(results, nullChain, ser, "null-cni", "DEL"); len(own) > 0 && len(floor) > 0 {
			fmt.Fprintf(&b, " (of which its own DEL process %s, the do-nothing plugin's %s, and ptp's DEL in this chain %s against ptp alone)",
				span(own, "%.2f ms"), span(floor, "%.2f ms"), span(primaryShift(results, chainName, ser, "DEL"), "%+.2f ms"))
		}
		if burst != "" {
			share := over(results, func(rs []result) (float64, bool) {
				m := find(rs, chainName, burst)
				if m == nil {
					return 0, false
				}
				pb := baseline(rs, burst)
				return 100 * (of(m).add99 - pb.add99) / pb.add99, true
			})
			if len(share) > 0 {
				fmt.Fprintf(&b, "; the burst's ADD p99 is %s over ptp's (target ≤ 25%%)", span(share, "%+.1f%%"))
			}
		}
		b.WriteString(".\n")
	}
	b.WriteString(versusIstio(results, runs))
	return b.String()
}

// versusIstio states mesh-cni's added time as a share of istio-cni's, per
// mode: what each adds over ptp alone in the same shape, divided.
func versusIstio(results [][]result, runs []run) string {
	pairs := [][2]string{
		{meshNft, istioNftables}, {meshIptNft, istioIptables},
		{meshLookup, istioNftables}, {meshLookup, istioIptables},
	}
	// Columns: p50 serial, then p99 of every shape, for ADD and for DEL.
	type col struct {
		head string
		pick func(figures) float64
		run  run
	}
	var cols []col
	for _, verb := range []string{"ADD", "DEL"} {
		p50, p99 := fAdd50, fAdd99
		if verb == "DEL" {
			p50, p99 = fDel50, fDel99
		}
		cols = append(cols, col{verb + " p50 serial", p50, runs[0]})
		for _, r := range runs {
			cols = append(cols, col{verb + " p99 " + shapeName(r), p99, r})
		}
	}
	var b strings.Builder
	for _, pr := range pairs {
		if find(results[0], pr[0], runs[0].name) == nil || find(results[0], pr[1], runs[0].name) == nil {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("\nmesh-cni's added time as a share of istio-cni's: each one's time over ptp alone in the same shape, mesh-cni ÷ istio-cni\n")
			b.WriteString("(below 1×: mesh-cni adds less; in parentheses mesh-cni's and istio-cni's added ms; a range is over the runs).\n\n| mesh-cni vs istio-cni |")
			for _, c := range cols {
				b.WriteString(" " + c.head + " |")
			}
			b.WriteString("\n|---|" + strings.Repeat("---|", len(cols)) + "\n")
		}
		fmt.Fprintf(&b, "| %s vs %s |", strings.TrimPrefix(pr[0], "ptp + "), strings.TrimPrefix(pr[1], "ptp + "))
		for _, c := range cols {
			var ratios, ms, is []float64
			for _, rs := range results {
				m, i := find(rs, pr[0], c.run.name), find(rs, pr[1], c.run.name)
				if m == nil || i == nil {
					continue
				}
				base := baseline(rs, c.run.name)
				mv, iv := c.pick(added(m, base)), c.pick(added(i, base))
				ms, is = append(ms, mv), append(is, iv)
				if iv > 0.05 {
					ratios = append(ratios, max(mv, 0)/iv)
				}
			}
			switch {
			case len(ms) == 0:
				b.WriteString(" |")
			case len(ratios) < len(ms):
				fmt.Fprintf(&b, " n/a (%s / %s) |", span(ms, "%+.2f"), span(is, "%+.2f"))
			default:
				fmt.Fprintf(&b, " **%s** (%s / %s) |", span(ratios, "%.2f×"), span(ms, "%+.2f"), span(is, "%+.2f"))
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

func shapeName(r run) string {
	switch {
	case r.burst:
		return "burst"
	case r.conc == 1:
		return "serial"
	}
	return fmt.Sprintf("%d concurrent", r.conc)
}
