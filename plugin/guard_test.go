package main

// Guards that only show when something goes wrong: a family the config
// turns off, a DEL with an entry that no longer parses, an agent answering
// for the wrong pod. Each runs the real plugin binary in a real netns.

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/mesh-cni/mesh-cni/internal/mesh"
)

// TestIPv6OffRefusesIPv6Pod: with "ipv6": false a meshed pod that has an
// IPv6 address fails ADD (its IPv6 traffic would bypass the proxy), from
// prevResult when chained and from the netns when not. An unmeshed pod, or
// a meshed IPv4-only one, is not refused.
func TestIPv6OffRefusesIPv6Pod(t *testing.T) {
	env := newNodeEnv(t)
	off := map[string]any{"ipv6": false}
	refused := func(t *testing.T, p *pod, err error) {
		t.Helper()
		var e *types.Error
		if !errors.As(err, &e) || e.Code != types.ErrInvalidNetworkConfig || !strings.Contains(e.Msg, `"ipv6" is false`) {
			t.Errorf("ADD %s with an IPv6 address: got %v, want code %d naming \"ipv6\"", podName(p), err, types.ErrInvalidNetworkConfig)
		}
		if got := ours(ruleDump(t, p.netns.Path())); len(got) != 0 {
			t.Errorf("refused ADD left rules via %v", got)
		}
	}
	for i, fam := range []string{"v6", "dual"} {
		t.Run(fam, func(t *testing.T) {
			c := newChain(t, env, chainOpts{version: "1.0.0", families: fam, subnet: 240 + i, mesh: off})
			meshed := newPod(t, "shop", "web-1", istioAnnotations(nil))
			_, err := c.add(meshed)
			t.Cleanup(func() { _ = c.del(meshed) })
			refused(t, meshed, err)
			plain := newPod(t, "shop", "batch-1", map[string]string{"team": "shop"})
			c.mustAdd(plain)
		})
	}
	t.Run("v4", func(t *testing.T) {
		c := newChain(t, env, chainOpts{version: "1.0.0", families: "v4", subnet: 242, mesh: off})
		meshed := newPod(t, "shop", "web-1", istioAnnotations(nil))
		c.mustAdd(meshed)
		if got := ours(ruleDump(t, meshed.netns.Path())); len(got) == 0 {
			t.Error("IPv4-only meshed pod got no rules")
		}
	})
	t.Run("unchained", func(t *testing.T) {
		p := newPod(t, "shop", "web-1", nil)
		name := filepath.Base(p.netns.Path())
		for _, c := range [][]string{
			{"link", "add", "d0", "type", "veth", "peer", "name", "d1"}, {"addr", "add", "fd00:18:f2::2/64", "dev", "d0", "nodad"},
			{"link", "set", "d0", "up"}, {"link", "set", "d1", "up"},
		} {
			if b, err := exec.Command("ip", append([]string{"-n", name}, c...)...).CombinedOutput(); err != nil {
				t.Fatalf("ip %v: %v %s", c, err, b)
			}
		}
		conf := withKey(baseConf("1.0.0", p.netns.Path(), istioAnnotations(nil)), "ipv6", false)
		delete(conf, "prevResult")
		_, err := direct{"ADD", p.netns.Path(), k8sArgs, conf}.run(t)
		refused(t, p, err)
	})
}

// TestDelInvalidEntryRemovesEveryBackend: rules written at ADD by a valid
// entry are removed by a DEL whose entry no longer parses, even when that
// entry names another backend: an invalid entry's backend is not trusted.
func TestDelInvalidEntryRemovesEveryBackend(t *testing.T) {
	backends := []string{"nftables", "iptables-legacy", "iptables-nft"}
	for i, added := range backends {
		named := backends[(i+1)%len(backends)]
		t.Run(added+"/"+named, func(t *testing.T) {
			p := newPod(t, "shop", "web-1", nil)
			netns := p.netns.Path()
			for _, bad := range []map[string]any{
				{"meshes": map[string]any{"istio": map[string]any{"proxyUID": -5}}},
				{"lookupTimeout": "forever"},
			} {
				add := withKey(baseConf("1.0.0", netns, istioAnnotations(nil)), "backend", added)
				if out, err := (direct{"ADD", netns, k8sArgs, add}).run(t); err != nil {
					t.Fatalf("ADD: %v %s", err, out)
				}
				if got := ours(ruleDump(t, netns)); len(got) == 0 {
					t.Fatal("ADD wrote no rules")
				}
				conf := withKey(baseConf("1.0.0", netns, istioAnnotations(nil)), "backend", named)
				for k, v := range bad {
					conf[k] = v
				}
				if out, err := (direct{"DEL", netns, k8sArgs, conf}).run(t); err != nil {
					t.Fatalf("DEL with %v: %v %s", bad, err, out)
				}
				if got := ours(ruleDump(t, netns)); len(got) != 0 {
					t.Errorf("DEL with an invalid entry naming %s (%v) left the %s rules: visible via %v", named, bad, added, got)
				}
			}
		})
	}
}

// TestLookupRefusesAnotherPodsAnswer: an agent that answers with another
// pod (a cache keyed wrong, a stale name reused) is not believed; with no
// API to ask instead, ADD fails "try again later" and writes nothing.
func TestLookupRefusesAnotherPodsAnswer(t *testing.T) {
	env := newNodeEnv(t) // no kubeconfig: the API fallback fails
	env.startAgent(t)
	c := newChain(t, env, chainOpts{version: "1.0.0", subnet: 243, mesh: map[string]any{"lookupTimeout": "1s"}})
	for _, other := range []mesh.Pod{linkerdPod("shop", "web-2"), linkerdPod("other", "web-1"), linkerdPod("other", "db-0")} {
		t.Run(other.Namespace+"/"+other.Name, func(t *testing.T) {
			env.mu.Lock()
			env.pods["shop/web-1"] = other
			env.mu.Unlock()
			p := newPod(t, "shop", "web-1", nil)
			_, err := c.add(p)
			t.Cleanup(func() { _ = c.del(p) })
			var e *types.Error
			if !errors.As(err, &e) || e.Code != types.ErrTryAgainLater || !strings.Contains(e.Details, other.Namespace+"/"+other.Name) {
				t.Errorf("ADD shop/web-1 answered as %s/%s: got %v, want code %d naming the other pod", other.Namespace, other.Name, err, types.ErrTryAgainLater)
			}
			if got := ours(ruleDump(t, p.netns.Path())); len(got) != 0 {
				t.Errorf("ADD used the answer for %s/%s: rules via %v", other.Namespace, other.Name, got)
			}
		})
	}
}
