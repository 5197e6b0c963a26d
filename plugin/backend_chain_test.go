package main

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

// TestBackends programs a meshed pod with each backend, for each address
// family, and checks each family is redirected by the tool that backend
// uses, and nothing else; DEL removes it.
func TestBackends(t *testing.T) {
	want := map[string]map[string][]string{
		"nftables": {
			"v4": {"nft list ruleset"}, "v6": {"nft list ruleset"}, "dual": {"nft list ruleset"},
		},
		"iptables-legacy": {
			"v4": {"iptables-legacy-save"}, "v6": {"ip6tables-legacy-save"},
			"dual": {"iptables-legacy-save", "ip6tables-legacy-save"},
		},
		"iptables-nft": {
			"v4": {"iptables-nft-save"}, "v6": {"ip6tables-nft-save"},
			"dual": {"iptables-nft-save", "ip6tables-nft-save"},
		},
	}
	subnet := 100
	for _, b := range []string{"nftables", "iptables-legacy", "iptables-nft"} {
		for _, fam := range []string{"v4", "v6", "dual"} {
			subnet++
			o := chainOpts{version: "1.0.0", families: fam, subnet: subnet, mesh: map[string]any{"backend": b}}
			t.Run(b+"/"+fam, func(t *testing.T) {
				c := newChain(t, newNodeEnv(t), o)
				p := newPod(t, "shop", "web-1", istioAnnotations(nil))
				c.mustAdd(p)
				dump := ruleDump(t, p.netns.Path())
				got := ours(dump)
				if !slices.Equal(got, want[b][fam]) {
					t.Errorf("rules visible via %v, want %v", got, want[b][fam])
				}
				// The istio inbound and outbound ports are in the rules.
				all := strings.Join(mapValues(dump), "\n")
				for _, port := range []string{"15001", "15006"} {
					if !strings.Contains(all, port) {
						t.Errorf("port %s missing from the rules", port)
					}
				}
				if err := c.check(p); err != nil {
					t.Errorf("CHECK: %v", err)
				}
				if err := c.del(p); err != nil {
					t.Fatalf("DEL: %v", err)
				}
				if got := ours(ruleDump(t, p.netns.Path())); len(got) != 0 {
					t.Errorf("DEL left rules via %v", got)
				}
			})
		}
	}
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// TestConcurrentAdds: 50 ADDs at once, as a node does after a restart,
// with the iptables backend (per-netns lock) and nftables. Every pod gets
// its own complete rules, none fails on a lock.
func TestConcurrentAdds(t *testing.T) {
	for i, b := range []string{"nftables", "iptables-legacy"} {
		t.Run(b, func(t *testing.T) {
			c := newChain(t, newNodeEnv(t), chainOpts{version: "1.0.0", subnet: 200 + i, mesh: map[string]any{"backend": b}})
			const n = 50
			pods := make([]*pod, n)
			for i := range pods {
				pods[i] = newPod(t, "shop", fmt.Sprintf("web-%d", i), istioAnnotations(nil))
			}
			var wg sync.WaitGroup
			errs := make([]error, n)
			for i, p := range pods {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[i] = c.add(p)
				}()
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Errorf("ADD %d: %v", i, err)
				}
			}
			for i, p := range pods {
				if got := ours(ruleDump(t, p.netns.Path())); len(got) == 0 {
					t.Errorf("pod %d has no rules", i)
				}
			}
			for i, p := range pods {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = c.del(p)
				}()
			}
			wg.Wait()
			for i, p := range pods {
				if errs[i] != nil {
					t.Errorf("DEL %d: %v", i, errs[i])
				}
				if got := ours(ruleDump(t, p.netns.Path())); len(got) != 0 {
					t.Errorf("pod %d kept rules after DEL via %v", i, got)
				}
			}
		})
	}
}
