package iptables

import (
	"testing"

	"github.com/containernetworking/plugins/pkg/testutils"

	"github.com/mesh-cni/mesh-cni/internal/rules"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// BenchmarkExec compares the two ways of running iptables-nft-restore in a
// pod netns: the sandbox thread (setns + private mount namespace, one
// exec) and "nsenter --net=" (two execs). Each iteration restores the
// IPv4 rules into a fresh netns.
func BenchmarkExec(b *testing.B) {
	rs := rules.Generate(rules.Spec{Families: []rules.Family{rules.IPv4}, ProxyUID: 1337,
		InboundPort: 15006, OutboundPort: 15001})
	input := rules.IptablesRestore(rs, rules.IPv4)
	be, err := New(NFT)
	if err != nil {
		b.Fatal(err)
	}
	path := be.bins[rules.IPv4].restore
	ways := map[string]func(netns string) error{
		"sandbox": func(netns string) error {
			return inSandbox(netns, func(s *sandbox) error { return restore(s, path, input) })
		},
		"nsenter": func(netns string) error {
			return nsenter(netns, path, input, "--noflush", "--wait=10")
		},
		"sandbox-only": func(netns string) error { // the sandbox's own cost, no exec
			return inSandbox(netns, func(*sandbox) error { return nil })
		},
	}
	for _, name := range []string{"sandbox", "nsenter", "sandbox-only"} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				n, err := testutils.NewNS()
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if err := ways[name](n.Path()); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				_ = testenv.RemoveNS(n)
				b.StartTimer()
			}
		})
	}
}
