// Package podstart holds the pure parts of `make bench-cluster` (the e2e
// spec labelled "bench" measures, this package plans and reports): the
// interleaving plan of batches per CNI chain, nearest-rank percentiles, and
// the section it writes into docs/benchmarks.md.
package podstart

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Batch is one run of pods under one CNI chain.
type Batch struct {
	Round   int
	Chain   string
	PerNode int
}

// Plan splits perNode pods per node and chain over rounds and interleaves
// the chains: each round runs every chain once, in the given order in even
// rounds and reversed in odd ones (A B C, C B A, A B C ...), so load that
// drifts over the run falls on every chain alike, and the last chain of a
// round is the first of the next (one switch fewer). Rounds get perNode/rounds
// pods each, the first ones one more until the rest is spent.
func Plan(chains []string, perNode, rounds int) ([]Batch, error) {
	if len(chains) == 0 {
		return nil, fmt.Errorf("plan: no chains")
	}
	if rounds < 1 || perNode < rounds {
		return nil, fmt.Errorf("plan: %d pods per node cannot fill %d rounds (at least one per round)", perNode, rounds)
	}
	var out []Batch
	for r := range rounds {
		n := perNode / rounds
		if r < perNode%rounds {
			n++
		}
		order := slices.Clone(chains)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, c := range order {
			out = append(out, Batch{Round: r, Chain: c, PerNode: n})
		}
	}
	return out, nil
}

// Percentile is the nearest-rank percentile p (0 < p <= 100) of d: the
// smallest value with at least p% of the values at or below it. Zero for
// no values.
func Percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(d))
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

// Summary is one chain's figures.
type Summary struct {
	N        int
	P50, P99 time.Duration
	Max      time.Duration
}

// Summarize gives the count, p50, p99 and maximum of d.
func Summarize(d []time.Duration) Summary {
	return Summary{N: len(d), P50: Percentile(d, 50), P99: Percentile(d, 99), Max: Percentile(d, 100)}
}

// Ratio is a ÷ b, NaN when b is zero (nothing measured).
func Ratio(a, b time.Duration) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}
