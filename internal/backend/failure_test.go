package backend_test

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/mesh-cni/mesh-cni/internal/backend"
	"github.com/mesh-cni/mesh-cni/internal/rules"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

func mustNew(t testing.TB, name string) backend.Backend {
	t.Helper()
	b, err := backend.New(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// badRuleSets fail at different stages: in validation, in the kernel for
// both families, and in the kernel for IPv6 only (after IPv4 went in).
func badRuleSets() map[string]rules.RuleSet {
	both := []rules.Family{rules.IPv4, rules.IPv6}
	good := rules.Generate(testSpec(rules.Redirect))
	portZero := rules.Generate(testSpec(rules.Redirect))
	portZero.Tables[0].Chains[0].Rules = append(portZero.Tables[0].Chains[0].Rules,
		rules.Rule{Proto: rules.TCP, Verdict: rules.Verdict{Kind: rules.RedirectTo, Port: 0}})
	missingChain := rules.Generate(testSpec(rules.Redirect))
	missingChain.Tables[0].Chains[0].Rules = append(missingChain.Tables[0].Chains[0].Rules,
		rules.Rule{Verdict: rules.Verdict{Kind: rules.Jump, Chain: "MESH_NOWHERE"}})
	// TPROXY is only valid in PREROUTING; the kernel (or iptables)
	// rejects it in an OUTPUT chain, which validation does not model.
	tproxyOut := func(dst []netip.Prefix) rules.RuleSet {
		rs := good
		rs.Tables = append(append([]rules.Table{}, good.Tables...), rules.Table{Name: "mangle", Chains: []rules.Chain{{
			Name: "MESH_BAD_OUTPUT", Hook: rules.Output,
			Rules: []rules.Rule{{Proto: rules.TCP, Dst: dst,
				Verdict: rules.Verdict{Kind: rules.TProxyTo, Port: 15006, Mark: rules.Mark{Value: 1, Mask: 1}}}},
		}}})
		rs.Families = both
		return rs
	}
	return map[string]rules.RuleSet{
		"redirect to port 0":    portZero,
		"jump to missing chain": missingChain,
		"kernel rejects":        tproxyOut(nil),
		"kernel rejects ipv6":   tproxyOut([]netip.Prefix{netip.MustParsePrefix("fd00::/8")}),
	}
}

// TestApplyFailureLeavesNothing applies a good rule set, then a bad one:
// the error must come back and the netns must hold none of our rules (not
// even the good ones from before).
func TestApplyFailureLeavesNothing(t *testing.T) {
	for _, name := range backends {
		for what, bad := range badRuleSets() {
			t.Run(name+"/"+what, func(t *testing.T) {
				b := mustNew(t, name)
				n := testenv.NewNS(t)
				if err := b.Apply(n.Path(), rules.Generate(testSpec(rules.TProxy))); err != nil {
					t.Fatalf("good Apply: %v", err)
				}
				err := b.Apply(n.Path(), bad)
				if err == nil {
					t.Fatal("bad Apply: no error")
				}
				t.Logf("error: %v", err)
				expectClean(t, n)
			})
		}
	}
}

// TestConcurrentApply programs 50 netns at once per backend: no lock
// errors, and each netns ends up with exactly its rules.
func TestConcurrentApply(t *testing.T) {
	const pods = 50
	for _, name := range backends {
		t.Run(name, func(t *testing.T) {
			b := mustNew(t, name)
			nss := make([]ns.NetNS, pods)
			for i := range nss {
				nss[i] = testenv.NewNS(t)
			}
			specs := make([]rules.RuleSet, pods)
			for i := range specs {
				s := testSpec(rules.Redirect)
				s.OutboundPort = uint16(20000 + i) // each pod its own rules
				specs[i] = rules.Generate(s)
			}
			errs := make([]error, pods)
			var wg sync.WaitGroup
			for i := range nss {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = b.Apply(nss[i].Path(), specs[i])
				}()
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Errorf("pod %d: Apply: %v", i, err)
					continue
				}
				if err := b.Check(nss[i].Path(), specs[i]); err != nil {
					t.Errorf("pod %d: Check: %v", i, err)
				}
			}
			for i := range nss {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = b.Delete(nss[i].Path())
				}()
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Errorf("pod %d: Delete: %v", i, err)
				}
			}
		})
	}
}

// TestHostLockHeld holds the host-wide xtables lock for the whole test, the
// way a busy kube-proxy does. Had the backends waited on it, Apply would
// fail once iptables-restore's wait runs out.
func TestHostLockHeld(t *testing.T) {
	if err := os.MkdirAll("/run", 0o755); err != nil {
		t.Fatal(err)
	}
	// Its own process group, so the cleanup kills the sleep that inherits
	// the lock too, and other iptables users on the host wait only for
	// this test's few seconds.
	holder := exec.Command("flock", "--exclusive", "/run/xtables.lock", "sh", "-c", "echo locked; exec sleep 120")
	holder.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatalf("flock: %v", err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-holder.Process.Pid, syscall.SIGKILL)
		_ = holder.Wait()
	})
	buf := make([]byte, 7)
	if _, err := out.Read(buf); err != nil || string(buf) != "locked\n" {
		t.Fatalf("flock did not take the lock: %q %v", buf, err)
	}
	// The lock really is held (checked without waiting, to keep the window
	// in which other iptables users on the host must wait short).
	if out, err := exec.Command("flock", "--nonblock", "/run/xtables.lock", "true").CombinedOutput(); err == nil {
		t.Fatalf("flock --nonblock got the lock that should be held:\n%s", out)
	}
	for _, name := range []string{backend.IptablesLegacy, backend.IptablesNFT} {
		t.Run(name, func(t *testing.T) {
			b := mustNew(t, name)
			n := testenv.NewNS(t)
			rs := rules.Generate(testSpec(rules.TProxy))
			if err := b.Apply(n.Path(), rs); err != nil {
				t.Fatalf("Apply with the host lock held: %v", err)
			}
			if err := b.Check(n.Path(), rs); err != nil {
				t.Fatalf("Check with the host lock held: %v", err)
			}
			if err := b.Delete(n.Path()); err != nil {
				t.Fatalf("Delete with the host lock held: %v", err)
			}
			expectClean(t, n)
		})
	}
}

// TestCheckNamesWhatIsMissing removes one rule behind the backend's back
// and expects Check to name the chain.
func TestCheckNamesWhatIsMissing(t *testing.T) {
	checkAfterTamper(t, rules.Redirect, map[string][]string{
		backend.NFTables:       {"nft", "flush", "chain", "inet", rules.NftTable, rules.ChainOutput},
		backend.IptablesNFT:    {"ip6tables-nft", "-t", "nat", "-D", rules.ChainOutput, "1"},
		backend.IptablesLegacy: {"iptables-legacy", "-t", "nat", "-D", rules.ChainOutput, "1"},
	}, rules.ChainOutput, nil)
}

// checkAfterTamper applies a rule set of mode with each backend, runs that
// backend's tamper command in the netns and expects Check to fail naming
// want; then runs after, if any.
func checkAfterTamper(t *testing.T, mode rules.Mode, tamper map[string][]string, want string, after func(*testing.T, backend.Backend, ns.NetNS)) {
	for _, name := range backends {
		t.Run(name, func(t *testing.T) {
			b := mustNew(t, name)
			n := testenv.NewNS(t)
			rs := rules.Generate(testSpec(mode))
			if err := b.Apply(n.Path(), rs); err != nil {
				t.Fatal(err)
			}
			cmd := tamper[name]
			if out, err := run(n, cmd[0], cmd[1:]...); err != nil {
				t.Fatalf("tamper %v: %v\n%s", cmd, err, out)
			}
			if err := b.Check(n.Path(), rs); err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("Check after %v: %v, want an error naming %s", cmd, err, want)
			}
			if after != nil {
				after(t, b, n)
			}
		})
	}
}

// TestReapplyDropsFamily: a dual-stack rule set, then an IPv4-only one,
// leaves nothing of ours in IPv6.
func TestReapplyDropsFamily(t *testing.T) {
	v4 := testSpec(rules.TProxy)
	v4.Families = []rules.Family{rules.IPv4}
	for _, name := range backends {
		t.Run(name, func(t *testing.T) {
			b := mustNew(t, name)
			n := testenv.NewNS(t)
			for _, rs := range []rules.RuleSet{rules.Generate(testSpec(rules.TProxy)), rules.Generate(v4)} {
				if err := b.Apply(n.Path(), rs); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.Check(n.Path(), rules.Generate(v4)); err != nil {
				t.Fatalf("Check: %v", err)
			}
			for _, c := range [][]string{{"ip6tables-nft-save"}, {"ip6tables-legacy-save"}, {"ip", "-6", "rule", "show"}} {
				out, err := run(n, c[0], c[1:]...)
				if err != nil || strings.Contains(out, "MESH_") || strings.Contains(out, "proto 109") {
					t.Errorf("%v after the IPv4-only Apply (%v):\n%s", c, err, out)
				}
			}
			if name == backend.NFTables {
				out, err := run(n, "nft", "list", "ruleset")
				if err != nil || strings.Contains(out, "ip6 ") {
					t.Errorf("nft ruleset still has IPv6 rules (%v):\n%s", err, out)
				}
			}
		})
	}
}

// TestCheckNamesExtraChain adds a chain of ours the rule set lacks.
func TestCheckNamesExtraChain(t *testing.T) {
	checkAfterTamper(t, rules.Redirect, map[string][]string{
		backend.NFTables:       {"nft", "add", "chain", "inet", rules.NftTable, "MESH_EXTRA"},
		backend.IptablesNFT:    {"iptables-nft", "-t", "mangle", "-N", "MESH_EXTRA"},
		backend.IptablesLegacy: {"ip6tables-legacy", "-t", "nat", "-N", "MESH_EXTRA"},
	}, "MESH_EXTRA", func(t *testing.T, b backend.Backend, n ns.NetNS) {
		// Delete removes it too: it is ours by name.
		if err := b.Delete(n.Path()); err != nil {
			t.Fatal(err)
		}
		expectClean(t, n)
	})
}

// TestGoneNetns: DEL after the runtime removed the netns succeeds; ADD
// into a missing netns fails with an error naming it.
func TestGoneNetns(t *testing.T) {
	missing := fmt.Sprintf("/run/netns/mesh-cni-gone-%d", os.Getpid())
	for _, name := range append(backends, backend.Auto) {
		b := mustNew(t, name)
		if err := b.Delete(missing); err != nil {
			t.Errorf("%s: Delete of a missing netns: %v", name, err)
		}
		if err := b.Apply(missing, rules.Generate(testSpec(rules.Redirect))); err == nil || !strings.Contains(err.Error(), missing) {
			t.Errorf("%s: Apply into a missing netns: %v, want an error naming it", name, err)
		}
	}
}

// TestCheckNamesMissingRoute removes the TPROXY ip rule behind the
// backend's back.
func TestCheckNamesMissingRoute(t *testing.T) {
	del := []string{"ip", "-6", "rule", "del", "fwmark", fmt.Sprint(rules.TProxyMark), "lookup", fmt.Sprint(rules.RouteTable)}
	tamper := map[string][]string{}
	for _, name := range backends {
		tamper[name] = del
	}
	checkAfterTamper(t, rules.TProxy, tamper, "ipv6 ip rule fwmark", nil)
}

func TestNew(t *testing.T) {
	b, err := backend.New("auto")
	if err != nil {
		t.Fatalf("auto: %v", err)
	}
	// This kernel has nf_tables with NAT, so auto must choose it.
	if b.Name() != backend.NFTables {
		t.Errorf("auto chose %s, want nftables", b.Name())
	}
	for _, name := range backends {
		if b := mustNew(t, name); b.Name() != name {
			t.Errorf("New(%q).Name() = %q", name, b.Name())
		}
	}
	if _, err := backend.New("ipchains"); err == nil {
		t.Error("New(ipchains): no error")
	}
}

// TestReapplyReplaces applies REDIRECT, then TPROXY, then TPROXY again into
// one netns: each Apply replaces the previous rules whole, with no stale
// chain and no duplicate jump.
func TestReapplyReplaces(t *testing.T) {
	redirect, tproxy := rules.Generate(testSpec(rules.Redirect)), rules.Generate(testSpec(rules.TProxy))
	for _, name := range backends {
		t.Run(name, func(t *testing.T) {
			b := mustNew(t, name)
			n := testenv.NewNS(t)
			for _, rs := range []rules.RuleSet{redirect, tproxy, tproxy} {
				if err := b.Apply(n.Path(), rs); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.Check(n.Path(), tproxy); err != nil {
				t.Fatalf("Check: %v", err)
			}
			var dump string
			switch name {
			case backend.NFTables:
				out, err := run(n, "nft", "list", "ruleset")
				if err != nil {
					t.Fatal(err)
				}
				dump = out
			default:
				for _, fam := range []string{"iptables", "ip6tables"} {
					out, err := run(n, fam+"-"+strings.TrimPrefix(name, "iptables-")+"-save")
					if err != nil {
						t.Fatal(err)
					}
					dump += out
					// One jump per hooked chain (two in mangle, one in nat).
					if got := strings.Count(out, "-j MESH_TPROXY_INBOUND\n") + strings.Count(out, "-j MESH_TPROXY_OUTPUT\n") + strings.Count(out, "-j MESH_OUTPUT\n"); got != 3 {
						t.Errorf("%s: %d jumps into our hooked chains, want 3:\n%s", fam, got, out)
					}
				}
			}
			if strings.Contains(dump, rules.ChainInbound+" ") || strings.Contains(dump, rules.ChainInRedirect) {
				t.Errorf("REDIRECT chains left after applying TPROXY:\n%s", dump)
			}
			// One rule in the inet table; one per family for iptables.
			want := 2
			if name == backend.NFTables {
				want = 1
			}
			if got := strings.Count(dump, "mesh-cni/tproxy-established"); got != want {
				t.Errorf("tproxy-established appears %d times, want %d:\n%s", got, want, dump)
			}
		})
	}
}
