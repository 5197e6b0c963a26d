package backend_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// checkBenchSpec is richSpec with long lists: 64 skipped subnets of each
// family, 32 ignored outbound port ranges, 16 inbound ports, so several
// anonymous sets of many elements.
func checkBenchSpec(mode rules.Mode) rules.Spec {
	s := richSpec(mode)
	s.SkipOutboundSubnets = nil
	for i := range 64 {
		s.SkipOutboundSubnets = append(s.SkipOutboundSubnets,
			netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(i), 0}), 24),
			netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0x00, 0x30, byte(i)}), 64))
	}
	s.IgnoreOutbound = nil
	for i := range 32 {
		p := uint16(20000 + 10*i)
		s.IgnoreOutbound = append(s.IgnoreOutbound, rules.PortRange{First: p, Last: p + uint16(i%3)})
	}
	s.IgnoreInbound = nil
	for i := range 16 {
		s.IgnoreInbound = append(s.IgnoreInbound, rules.PortRange{First: uint16(30000 + 2*i), Last: uint16(30000 + 2*i)})
	}
	return s
}

// BenchmarkCheck checks one programmed netns again and again: the cost of
// a CNI CHECK, set contents included, for the rich rule set of the Check
// tests and for a large one.
func BenchmarkCheck(b *testing.B) {
	for _, name := range backends {
		for _, size := range []struct {
			name string
			spec func(rules.Mode) rules.Spec
		}{{"rich", richSpec}, {"large", checkBenchSpec}} {
			for _, mode := range benchModes {
				b.Run(name+"/"+size.name+"/"+string(mode), func(b *testing.B) {
					be := mustNew(b, name)
					rs := rules.Generate(size.spec(mode))
					n := benchNS(b)
					defer dropNS(b, n)
					if err := be.Apply(n.Path(), rs); err != nil {
						b.Fatal(err)
					}
					var d []time.Duration
					for b.Loop() {
						start := time.Now()
						if err := be.Check(n.Path(), rs); err != nil {
							b.Fatal(err)
						}
						d = append(d, time.Since(start))
					}
					report(b, d)
				})
			}
		}
	}
}
