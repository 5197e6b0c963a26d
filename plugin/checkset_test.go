package main

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/mesh-cni/mesh-cni/internal/mesh"
)

// TestCheckNamesChangedSetElement: with the nftables backend, a pod's
// excluded outbound ports become an anonymous set. One port range of it
// changed behind the plugin's back (the rule replaced by one with another
// set, all else equal) fails CHECK with code 101, naming the pod and the
// range.
func TestCheckNamesChangedSetElement(t *testing.T) {
	c := newChain(t, newNodeEnv(t), chainOpts{version: "1.0.0", families: "dual", subnet: 231, mesh: map[string]any{"backend": "nftables"}})
	p := newPod(t, "shop", "web-1", istioAnnotations(map[string]string{mesh.IstioExcludeOutboundPorts: "9090,9095-9099"}))
	c.mustAdd(p)
	if err := c.check(p); err != nil {
		t.Fatalf("CHECK right after ADD: %v", err)
	}
	nft := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("nsenter", append([]string{"--net=" + p.netns.Path(), "nft"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("nft %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	const from, to = "{ 9090, 9095-9099 }", "{ 9090, 9095-9098 }"
	var chain, handle, rule string
	for _, line := range strings.Split(nft("-a", "list", "table", "inet", "mesh_cni"), "\n") {
		line = strings.TrimSpace(line)
		if name, ok := strings.CutPrefix(line, "chain "); ok {
			chain, _, _ = strings.Cut(name, " ")
		}
		if body, h, ok := strings.Cut(line, " # handle "); ok && strings.Contains(body, from) {
			handle, rule = h, strings.Replace(body, from, to, 1)
			break
		}
	}
	if handle == "" {
		t.Fatalf("no rule with %s in the pod's table", from)
	}
	// "nft replace rule" aborts on an anonymous interval set (nft 1.0.6):
	// insert the new rule before the old one and delete that, at once.
	at := "inet mesh_cni " + chain
	nft("insert rule " + at + " position " + handle + " " + rule + "; delete rule " + at + " handle " + handle)
	err := c.check(p)
	var e *types.Error
	if !errors.As(err, &e) || e.Code != ErrRulesMissing || !strings.Contains(e.Msg, "shop/web-1") || !strings.Contains(e.Msg, "9095-9099") {
		t.Errorf("CHECK after one port range of a set changed: %v, want code %d naming the pod and 9095-9099", err, ErrRulesMissing)
	}
	t.Logf("CHECK: %v", err)
	if err := c.del(p); err != nil {
		t.Errorf("DEL: %v", err)
	}
}
