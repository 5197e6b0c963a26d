package podstart

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestPercentileNearestRank(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		d := make([]time.Duration, len(v))
		for i, x := range v {
			d[i] = time.Duration(x) * time.Millisecond
		}
		return d
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // 100 ... 1, unsorted on purpose
	}
	for _, tc := range []struct {
		name string
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one", ms(7), 99, 7 * time.Millisecond},
		{"p50 of 4 is the 2nd", ms(40, 10, 30, 20), 50, 20 * time.Millisecond},
		{"p50 of 5 is the 3rd", ms(5, 1, 4, 2, 3), 50, 3 * time.Millisecond},
		{"p99 of 100 is the 99th", ms(hundred...), 99, 99 * time.Millisecond},
		{"p99 of 200 is the 198th", ms(append(hundred, hundred...)...), 99, 99 * time.Millisecond},
		{"p99 of 10 is the max", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 1000), 99, time.Second},
		{"p100 is the max", ms(3, 9, 1), 100, 9 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Percentile(tc.in, tc.p); got != tc.want {
				t.Errorf("Percentile(%v, %v) = %v, want %v", tc.in, tc.p, got, tc.want)
			}
		})
	}
}

func TestPercentileLeavesInputAlone(t *testing.T) {
	in := []time.Duration{3, 1, 2}
	Percentile(in, 50)
	if in[0] != 3 || in[1] != 1 || in[2] != 2 {
		t.Errorf("input reordered: %v", in)
	}
}

func TestPlanInterleaves(t *testing.T) {
	b, err := Plan(Chains, 100, 4)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	total := map[string]int{}
	for _, x := range b {
		order = append(order, x.Chain)
		total[x.Chain] += x.PerNode
	}
	want := "istio-cni,flannel alone,mesh-cni," +
		"mesh-cni,flannel alone,istio-cni," +
		"istio-cni,flannel alone,mesh-cni," +
		"mesh-cni,flannel alone,istio-cni"
	if got := strings.Join(order, ","); got != want {
		t.Errorf("order:\n got %s\nwant %s", got, want)
	}
	for _, c := range Chains {
		if total[c] != 100 {
			t.Errorf("%s: %d pods per node, want 100", c, total[c])
		}
	}
	// Switches: a change of chain between consecutive batches. Reversing
	// every other round saves one per round boundary.
	switches := 0
	for i := 1; i < len(b); i++ {
		if b[i].Chain != b[i-1].Chain {
			switches++
		}
	}
	if switches != 8 {
		t.Errorf("%d switches, want 8 (2 per round, none at a round boundary)", switches)
	}
}

func TestPlanSpreadsTheRest(t *testing.T) {
	b, err := Plan([]string{"a", "b"}, 10, 4)
	if err != nil {
		t.Fatal(err)
	}
	var perRound []int
	for _, x := range b {
		if x.Chain == "a" {
			perRound = append(perRound, x.PerNode)
		}
	}
	if got := perRound; len(got) != 4 || got[0] != 3 || got[1] != 3 || got[2] != 2 || got[3] != 2 {
		t.Errorf("pods per round of a: %v, want [3 3 2 2]", got)
	}
}

func TestPlanRefuses(t *testing.T) {
	for _, tc := range []struct {
		chains          []string
		perNode, rounds int
	}{
		{nil, 10, 2},
		{Chains, 3, 4},
		{Chains, 10, 0},
	} {
		if _, err := Plan(tc.chains, tc.perNode, tc.rounds); err == nil {
			t.Errorf("Plan(%v, %d, %d): no error", tc.chains, tc.perNode, tc.rounds)
		}
	}
}

func run() Run {
	r := Run{Host: "h", Kubernetes: "v1.34.4", Istio: "v1.28.0", CPUs: 2, Nodes: 2, At: time.Date(2026, 11, 28, 7, 30, 0, 0, time.UTC),
		LoadBefore: "3.10 2.00 1.00", LoadAfter: "5.00 4.00 3.00", PerNode: 2, Rounds: 2, InFlight: 2, Elapsed: 90 * time.Second}
	mk := func(chain string, ms ...int) Result {
		res := Result{Chain: chain, Verified: 1}
		for i, v := range ms {
			res.Samples = append(res.Samples, Sample{Round: i % 2, Local: time.Duration(v) * time.Millisecond, Server: time.Second})
		}
		return res
	}
	r.Results = []Result{mk(Baseline, 1000, 1000, 1000, 1000), mk(Istio, 2000, 2000, 2000, 4000), mk(Mesh, 1500, 1500, 1500, 2000)}
	return r
}

func TestRatios(t *testing.T) {
	p50, p99 := run().Ratios()
	if p50 != 0.75 || p99 != 0.5 {
		t.Errorf("ratios p50 %v p99 %v, want 0.75 and 0.5", p50, p99)
	}
	r := run()
	r.Results = r.Results[:2]
	if p50, _ := r.Ratios(); !math.IsNaN(p50) {
		t.Errorf("ratio without mesh-cni: %v, want NaN", p50)
	}
}

func TestRender(t *testing.T) {
	s := run().Render()
	for _, want := range []string{
		"**mesh-cni ÷ istio-cni: p50 0.75, p99 0.50.**",
		"| istio-cni | 4 | 2000 ms | 4000 ms | 4000 ms | 1000 ms / 1000 ms | 1 | 0 | 0 |",
		"| mesh-cni | 4 | 1500 ms | 2000 ms |",
		"| flannel alone | 4 | 1000 ms |",
		"istio-cni +1000 ms at p50, +3000 ms at p99; mesh-cni +500 ms at p50, +1000 ms at p99",
		"load average before the run: 3.10 2.00 1.00, after: 5.00 4.00 3.00",
		"2026-11-28 07:30 UTC",
		"**The machine was shared with other work (load average 3.1 on 2 CPUs at the start).**",
		"| 2 | 2000 ms (2) | 1000 ms (2) | 1500 ms (2) |",
		"2 pods per node per chain",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("section lacks %q:\n%s", want, s)
		}
	}
}
