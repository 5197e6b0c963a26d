package main

import (
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/mesh-cni/mesh-cni/internal/backend/iptables"
	"github.com/mesh-cni/mesh-cni/internal/config"
	"github.com/mesh-cni/mesh-cni/internal/node"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// TestBadConfigSparesExemptPods: an entry with a bad value still passes
// the pods it exempts (kube-system, the agent's own), with the primary's
// result, and DEL of them succeeds; every other pod fails with the error
// naming the key.
func TestBadConfigSparesExemptPods(t *testing.T) {
	for i, tc := range []struct {
		name   string
		conf   map[string]any
		code   uint
		msg    string
		exempt [][2]string
	}{
		{"proxyUID", map[string]any{"backend": "nftables", "meshes": map[string]any{"istio": map[string]any{"proxyUID": -5}}},
			types.ErrInvalidNetworkConfig, "proxyUID", [][2]string{{"kube-system", "coredns-1"}, {"mesh-cni", "mesh-cni-x1"}}},
		// The example: both the backend and proxyUID are bad.
		{"backend", map[string]any{"backend": "nft", "meshes": map[string]any{"istio": map[string]any{"proxyUID": -5}}},
			types.ErrInvalidNetworkConfig, "backend", [][2]string{{"kube-system", "coredns-1"}}},
		// A listed name that is not a namespace name matches no pod; the
		// valid ones still exempt theirs.
		{"excludeNamespaces", map[string]any{"excludeNamespaces": []string{"kube-system", "Not_A_Namespace"}},
			types.ErrInvalidNetworkConfig, "excludeNamespaces", [][2]string{{"kube-system", "coredns-1"}}},
		// Mistyped, it takes the default (kube-system); the agent's own
		// pods stay exempt by name.
		{"excludeNamespaces type", map[string]any{"excludeNamespaces": "kube-system"},
			types.ErrDecodingFailure, "excludeNamespaces", [][2]string{{"kube-system", "coredns-1"}, {"mesh-cni", "mesh-cni-x1"}}},
		// Another mistyped key leaves the exemption intact.
		{"ipv6 type", map[string]any{"ipv6": "yes"},
			types.ErrDecodingFailure, "ipv6", [][2]string{{"kube-system", "coredns-1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newChain(t, newNodeEnv(t), chainOpts{version: "1.0.0", subnet: 150 + i, mesh: tc.conf})
			for _, id := range tc.exempt {
				p := newPod(t, id[0], id[1], istioAnnotations(nil))
				res, err := c.add(p)
				if err != nil {
					t.Fatalf("ADD %s: %v", podName(p), err)
				}
				r, err := current.NewResultFromResult(res)
				if err != nil || len(r.IPs) != 1 || len(r.Interfaces) == 0 {
					t.Errorf("ADD %s: result %v (%v), want the primary's", podName(p), res, err)
				}
				if got := ours(ruleDump(t, p.netns.Path())); len(got) != 0 {
					t.Errorf("ADD %s wrote rules via %v", podName(p), got)
				}
				if err := c.del(p); err != nil {
					t.Errorf("DEL %s: %v", podName(p), err)
				}
			}
			p := newPod(t, "shop", "web-1", istioAnnotations(nil))
			_, err := c.add(p)
			var e *types.Error
			if !errors.As(err, &e) || e.Code != tc.code || !strings.Contains(e.Error(), tc.msg) {
				t.Errorf("ADD shop/web-1: %v, want code %d naming %s", err, tc.code, tc.msg)
			}
			if err := c.del(p); err != nil {
				t.Errorf("DEL shop/web-1: %v", err)
			}
		})
	}
}

// TestBadValueClipped: an error repeating a value carries at most
// config.MaxEcho bytes of it, marked as cut.
func TestBadValueClipped(t *testing.T) {
	long := "/" + strings.Repeat("x", 5000)
	c := newChain(t, newNodeEnv(t), chainOpts{version: "1.0.0", subnet: 156, mesh: map[string]any{"readyMarker": "rel" + long}})
	_, err := c.add(newPod(t, "shop", "web-1", map[string]string{}))
	var e *types.Error
	if !errors.As(err, &e) || e.Code != types.ErrInvalidNetworkConfig || !strings.Contains(e.Msg, "readyMarker") {
		t.Fatalf("ADD: %v, want an invalid readyMarker", err)
	}
	if len(e.Msg)+len(e.Details) > config.MaxEcho+200 || !strings.Contains(e.Msg, "bytes cut]") {
		t.Errorf("error of %d bytes, want the value cut to %d: %.400s", len(e.Msg)+len(e.Details), config.MaxEcho, e.Msg)
	}
}

// TestMissingIptablesVariant: backend iptables-legacy pinned on a host
// without its tools (the tool search path is an empty directory). A
// meshed pod falls back to nftables, is redirected, and the fallback is
// reported; DEL of it and of an unmeshed pod succeeds and leaves nothing,
// and so does DEL of a pod another writer left iptables-nft chains in.
func TestMissingIptablesVariant(t *testing.T) {
	proxy := buildTestproxy(t)
	env := newNodeEnv(t)
	c := newChain(t, env, chainOpts{version: "1.0.0", subnet: 157, mesh: map[string]any{"backend": "iptables-legacy"}})

	// The nft variant's chains, written with the host's tools before they
	// are hidden (an entry that pinned iptables-nft earlier).
	left := newPod(t, "shop", "old-1", map[string]string{})
	c.mustAdd(left)
	restore := exec.Command("nsenter", "--net="+left.netns.Path(), "iptables-nft-restore", "--noflush")
	restore.Stdin = strings.NewReader("*nat\n:MESH_OUTPUT - [0:0]\n-A OUTPUT -p tcp -j MESH_OUTPUT\n-A MESH_OUTPUT -p tcp -j REDIRECT --to-ports 15001\nCOMMIT\n")
	if out, err := restore.CombinedOutput(); err != nil {
		t.Fatalf("iptables-nft-restore: %v %s", err, out)
	}

	t.Setenv(iptables.ToolsPathEnv, t.TempDir())
	delClean := func(p *pod) {
		t.Helper()
		if err := c.del(p); err != nil {
			t.Errorf("DEL %s: %v", podName(p), err)
		}
		if got := ours(ruleDump(t, p.netns.Path())); len(got) != 0 {
			t.Errorf("DEL %s left rules via %v", podName(p), got)
		}
	}
	delClean(left)

	meshed := newPod(t, "shop", "web-1", istioAnnotations(nil))
	c.mustAdd(meshed)
	if got := ours(ruleDump(t, meshed.netns.Path())); !slices.Equal(got, []string{"nft list ruleset"}) {
		t.Errorf("rules visible via %v, want nftables only", got)
	}
	checkRedirected(t, proxy, c, meshed, fmt.Sprint(testenv.HostPort(t)))
	if err := c.check(meshed); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	fell := slices.ContainsFunc(env.reported(), func(ev node.Event) bool {
		return ev.Command == "ADD" && ev.Decision == "meshed" && ev.Backend == "nftables" && ev.Fallback == "iptables-legacy"
	})
	if !fell {
		t.Errorf("no fallback reported: %+v", env.reported())
	}

	plain := newPod(t, "shop", "plain-1", map[string]string{})
	c.mustAdd(plain)
	for _, p := range []*pod{meshed, plain, meshed, left} { // twice: DEL is idempotent
		delClean(p)
	}
}
