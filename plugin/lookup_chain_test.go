package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/mesh-cni/mesh-cni/internal/lookup/podget"
	"github.com/mesh-cni/mesh-cni/internal/mesh"
)

// linkerdPod is what the agent's cache holds for a Linkerd pod with the
// proxy as a native sidecar.
func linkerdPod(ns, name string) mesh.Pod {
	uid := int64(2102)
	return mesh.Pod{
		Namespace: ns, Name: name, SpecKnown: true,
		Annotations:    map[string]string{"linkerd.io/proxy-version": "edge-26.1.1"},
		InitContainers: []mesh.Container{{Name: "linkerd-proxy", RestartPolicy: "Always", RunAsUser: &uid}},
		Containers:     []mesh.Container{{Name: "web"}},
	}
}

// The annotations say "a Linkerd proxy was injected" but not in which
// mode, so the plugin asks the agent's cache over its unix socket.
func TestLookupAgentSocket(t *testing.T) {
	env := newNodeEnv(t)
	env.startAgent(t)
	c := newChain(t, env, chainOpts{version: "1.0.0", subnet: 40})

	env.setPod(linkerdPod("shop", "web-1"))
	meshed := newPod(t, "shop", "web-1", map[string]string{"linkerd.io/proxy-version": "edge-26.1.1"})
	c.mustAdd(meshed)
	dump := ruleDump(t, meshed.netns.Path())["nft list ruleset"]
	if !strings.Contains(dump, "4143") || !strings.Contains(dump, "4140") {
		t.Errorf("linkerd ports missing from the rules:\n%s", dump)
	}
	if err := c.check(meshed); err != nil {
		t.Errorf("CHECK: %v", err)
	}

	// A runtime that passes no annotations: the agent's answer decides.
	env.setPod(mesh.Pod{Namespace: "shop", Name: "batch-1", SpecKnown: true, Containers: []mesh.Container{{Name: "batch"}}})
	plain := newPod(t, "shop", "batch-1", nil)
	c.mustAdd(plain)
	if got := ours(ruleDump(t, plain.netns.Path())); len(got) != 0 {
		t.Errorf("pod without sidecar got rules via %v", got)
	}
	env.setPod(linkerdPod("shop", "web-2"))
	noAnn := newPod(t, "shop", "web-2", nil)
	c.mustAdd(noAnn)
	if got := ours(ruleDump(t, noAnn.netns.Path())); len(got) == 0 {
		t.Error("meshed pod with no runtime annotations got no rules")
	}

	// Each verb reported one event to the agent.
	var adds int
	for _, ev := range env.reported() {
		if ev.Command == "ADD" && ev.Decision == "meshed" && ev.Mesh == "linkerd" {
			adds++
		}
	}
	if adds != 2 {
		t.Errorf("want 2 meshed ADD events, got %+v", env.reported())
	}
}

// With neither the agent nor the API, a pod that may need the redirect
// fails ADD with "try again later"; exempt pods are never blocked; DEL
// after the failed ADD succeeds.
func TestLookupFailsClosed(t *testing.T) {
	env := newNodeEnv(t) // no agent, no kubeconfig
	c := newChain(t, env, chainOpts{version: "1.0.0", subnet: 41, mesh: map[string]any{
		"lookupTimeout": "1s", "agentNamespace": "mesh-system", "excludeNamespaces": []string{"kube-system"},
	}})
	for _, p := range []*pod{
		newPod(t, "shop", "web-1", map[string]string{"linkerd.io/proxy-version": "edge-26.1.1"}),
		newPod(t, "shop", "web-2", nil),
	} {
		_, err := c.add(p)
		var e *types.Error
		if !errors.As(err, &e) || e.Code != types.ErrTryAgainLater || !strings.Contains(e.Msg, "cannot judge pod "+podName(p)) ||
			!strings.Contains(e.Details, "agent socket") || !strings.Contains(e.Details, "kubeconfig") {
			t.Errorf("ADD %s: got %v, want code 11 naming the pod and both lookups", podName(p), err)
		}
		if err := c.del(p); err != nil {
			t.Errorf("DEL after failed ADD: %v", err)
		}
		if got := ours(ruleDump(t, p.netns.Path())); len(got) != 0 {
			t.Errorf("failed ADD left rules via %v", got)
		}
	}
	for _, p := range []*pod{
		newPod(t, "kube-system", "coredns-1", nil),
		newPod(t, "mesh-system", "mesh-cni-agent-x7k2p", nil),
	} {
		c.mustAdd(p)
		if got := ours(ruleDump(t, p.netns.Path())); len(got) != 0 {
			t.Errorf("exempt pod %s got rules via %v", podName(p), got)
		}
	}
}

// A bin dir holding the plugin without mesh-cni-podget (a hand-copied
// plugin, a half-done install): when the agent cannot answer, a pod that
// needs the lookup fails ADD with code 11 naming the missing helper; it is
// never passed through unredirected. Exempt pods and DEL are unaffected.
func TestLookupHelperMissing(t *testing.T) {
	bin := t.TempDir()
	b, err := os.ReadFile(filepath.Join(pluginDir, "mesh-cni"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "mesh-cni"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	env := newNodeEnv(t) // agent down
	c := newChain(t, env, chainOpts{version: "1.0.0", subnet: 43, binDir: bin, mesh: map[string]any{
		"lookupTimeout": "1s", "excludeNamespaces": []string{"kube-system"},
	}})
	for _, p := range []*pod{
		newPod(t, "shop", "web-1", map[string]string{"linkerd.io/proxy-version": "edge-26.1.1"}),
		newPod(t, "shop", "web-2", nil),
	} {
		_, err := c.add(p)
		var e *types.Error
		want := filepath.Join(bin, podget.Binary) + " is missing"
		if !errors.As(err, &e) || e.Code != types.ErrTryAgainLater || !strings.Contains(e.Details, want) {
			t.Errorf("ADD %s: got %v, want code 11 with %q", podName(p), err, want)
		}
		if got := ours(ruleDump(t, p.netns.Path())); len(got) != 0 {
			t.Errorf("failed ADD left rules via %v", got)
		}
		if err := c.del(p); err != nil {
			t.Errorf("DEL after failed ADD: %v", err)
		}
	}
	// The helper is only needed when the agent cannot answer.
	env.startAgent(t)
	env.setPod(linkerdPod("shop", "web-3"))
	meshed := newPod(t, "shop", "web-3", map[string]string{"linkerd.io/proxy-version": "edge-26.1.1"})
	c.mustAdd(meshed)
	if got := ours(ruleDump(t, meshed.netns.Path())); len(got) == 0 {
		t.Error("pod the agent answered for got no rules")
	}
	exempt := newPod(t, "kube-system", "coredns-1", nil)
	c.mustAdd(exempt)
}
