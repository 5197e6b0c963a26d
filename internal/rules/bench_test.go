package rules

import "testing"

// The per-ADD cost of building and rendering a dual-stack TPROXY rule set.
func BenchmarkGenerate(b *testing.B) {
	s := istioSpec(dual)
	s.Mode, s.CaptureDNS = TProxy, true
	b.ReportAllocs()
	for b.Loop() {
		Generate(s)
	}
}

func BenchmarkRender(b *testing.B) {
	s := istioSpec(dual)
	s.CaptureDNS = true
	rs := Generate(s)
	b.Run("nft", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			Nft(rs)
		}
	})
	b.Run("iptables", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			IptablesRestore(rs, IPv4)
			IptablesRestore(rs, IPv6)
		}
	})
}
