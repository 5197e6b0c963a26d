package backend_test

import (
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"golang.org/x/sys/unix"

	"github.com/mesh-cni/mesh-cni/internal/backend"
	"github.com/mesh-cni/mesh-cni/internal/backend/nftables"
	"github.com/mesh-cni/mesh-cni/internal/rules"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// Benchmarks program a fresh netns per iteration (created and removed
// outside the timer) and report p50/p99 next to the mean. make bench runs
// them; nothing here asserts a time.

func benchNS(b *testing.B) ns.NetNS {
	b.StopTimer()
	defer b.StartTimer()
	n, err := testutils.NewNS()
	if err != nil {
		b.Fatal(err)
	}
	return n
}

func dropNS(b *testing.B, n ns.NetNS) {
	b.StopTimer()
	defer b.StartTimer()
	_ = testenv.RemoveNS(n)
}

func report(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	q := func(p float64) float64 { return float64(d[int(p*float64(len(d)-1))]) / 1e6 }
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
}

var benchModes = []rules.Mode{rules.Redirect, rules.TProxy}

func BenchmarkApply(b *testing.B) {
	for _, name := range backends {
		for _, mode := range benchModes {
			b.Run(name+"/"+string(mode), func(b *testing.B) {
				be := mustNew(b, name)
				rs := rules.Generate(testSpec(mode))
				var d []time.Duration
				for b.Loop() {
					n := benchNS(b)
					start := time.Now()
					if err := be.Apply(n.Path(), rs); err != nil {
						b.Fatal(err)
					}
					d = append(d, time.Since(start))
					dropNS(b, n)
				}
				report(b, d)
			})
		}
	}
}

func BenchmarkDelete(b *testing.B) {
	for _, name := range backends {
		for _, mode := range benchModes {
			b.Run(name+"/"+string(mode), func(b *testing.B) {
				be := mustNew(b, name)
				rs := rules.Generate(testSpec(mode))
				var d []time.Duration
				for b.Loop() {
					n := benchNS(b)
					b.StopTimer()
					if err := be.Apply(n.Path(), rs); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					start := time.Now()
					if err := be.Delete(n.Path()); err != nil {
						b.Fatal(err)
					}
					d = append(d, time.Since(start))
					dropNS(b, n)
				}
				report(b, d)
			})
		}
	}
}

// BenchmarkDeleteHandoff is the nftables Delete as the plugin runs it:
// its sockets kept (nftables.KeepSockets) and closed afterwards by another
// goroutine, as the agent does, outside the timer.
func BenchmarkDeleteHandoff(b *testing.B) {
	nftables.KeepSockets(true)
	defer nftables.KeepSockets(false)
	for _, mode := range benchModes {
		b.Run(string(mode), func(b *testing.B) {
			be := nftables.New()
			rs := rules.Generate(testSpec(mode))
			var d []time.Duration
			var closing sync.WaitGroup
			for b.Loop() {
				n := benchNS(b)
				b.StopTimer()
				if err := be.Apply(n.Path(), rs); err != nil {
					b.Fatal(err)
				}
				closeFDs(&closing, nftables.TakeSockets())
				b.StartTimer()
				start := time.Now()
				if err := be.Delete(n.Path()); err != nil {
					b.Fatal(err)
				}
				d = append(d, time.Since(start))
				closeFDs(&closing, nftables.TakeSockets())
				dropNS(b, n)
			}
			closing.Wait()
			report(b, d)
		})
	}
}

func closeFDs(wg *sync.WaitGroup, fds []int) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
}

// BenchmarkNaivePerRule is the baseline: the same REDIRECT rules applied
// the way linkerd-cni does, one "nsenter iptables" exec per chain and per
// rule.
func BenchmarkNaivePerRule(b *testing.B) {
	rs := rules.Generate(testSpec(rules.Redirect))
	for _, variant := range []string{"nft", "legacy"} {
		b.Run("iptables-"+variant, func(b *testing.B) {
			var cmds [][]string
			for _, fam := range rs.Families {
				bin := "iptables-" + variant
				if fam == rules.IPv6 {
					bin = "ip6tables-" + variant
				}
				cmds = append(cmds, perRule(bin, rules.IptablesRestore(rs, fam))...)
			}
			b.ReportMetric(float64(len(cmds)), "execs/op")
			var d []time.Duration
			for b.Loop() {
				n := benchNS(b)
				start := time.Now()
				for _, c := range cmds {
					args := append([]string{"--net=" + n.Path(), "--"}, c...)
					cmd := exec.Command("nsenter", args...)
					cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "XTABLES_LOCKFILE=" + n.Path()}
					if out, err := cmd.CombinedOutput(); err != nil {
						b.Fatalf("%v: %v\n%s", c, err, out)
					}
				}
				d = append(d, time.Since(start))
				dropNS(b, n)
			}
			report(b, d)
		})
	}
}

// perRule turns iptables-restore input into one iptables command per chain
// and rule.
func perRule(bin, input string) [][]string {
	var out [][]string
	table := ""
	for _, line := range strings.Split(input, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
		case strings.HasPrefix(line, ":"):
			name, _, _ := strings.Cut(line[1:], " ")
			out = append(out, []string{bin, "-w", "-t", table, "-N", name})
		case strings.HasPrefix(line, "-A "):
			out = append(out, append([]string{bin, "-w", "-t", table}, fields(line)...))
		}
	}
	return out
}

// fields splits a rule line, keeping quoted comments whole.
func fields(line string) []string {
	var out []string
	for len(line) > 0 {
		line = strings.TrimLeft(line, " ")
		if strings.HasPrefix(line, `"`) {
			end := strings.Index(line[1:], `"`) + 1
			out = append(out, line[1:end])
			line = line[end+1:]
			continue
		}
		f, rest, _ := strings.Cut(line, " ")
		if f != "" {
			out = append(out, f)
		}
		line = rest
	}
	return out
}

// BenchmarkNewAuto is the cost of "auto" on every plugin run: the nftables
// probe (one netlink transaction in the host netns).
func BenchmarkNewAuto(b *testing.B) {
	for b.Loop() {
		if _, err := backend.New(backend.Auto); err != nil {
			b.Fatal(err)
		}
	}
}
