package main

import (
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/testutils"

	"github.com/mesh-cni/mesh-cni/internal/node"
)

// TestChain runs every verb through libcni for every spec version, after
// ptp and after bridge, for IPv4, IPv6 and dual-stack pods.
func TestChain(t *testing.T) {
	subnet := 0
	for _, ver := range specVers {
		for _, primary := range []string{"ptp", "bridge"} {
			for _, fam := range []string{"v4", "v6", "dual"} {
				subnet++
				o := chainOpts{version: ver, primary: primary, families: fam, subnet: subnet}
				t.Run(fmt.Sprintf("%s/%s/%s", ver, primary, fam), func(t *testing.T) { testChain(t, o) })
			}
		}
	}
}

func testChain(t *testing.T, o chainOpts) {
	env := newNodeEnv(t)
	c := newChain(t, env, o)

	meshed := newPod(t, "shop", "web-1", istioAnnotations(nil))
	plain := newPod(t, "shop", "batch-1", map[string]string{"team": "shop"})
	system := newPod(t, "kube-system", "coredns-1", istioAnnotations(nil))

	for _, p := range []*pod{meshed, plain, system} {
		res, err := c.add(p)
		if err != nil {
			t.Fatalf("ADD %s: %v", podName(p), err)
		}
		checkResult(t, o, res)
	}
	if got := ours(ruleDump(t, meshed.netns.Path())); len(got) == 0 {
		t.Fatalf("meshed pod has no mesh-cni rules")
	}
	for _, p := range []*pod{plain, system} {
		if got := ours(ruleDump(t, p.netns.Path())); len(got) != 0 {
			t.Errorf("%s must be untouched, found our rules via %v", podName(p), got)
		}
	}

	if o.version == "1.1.0" {
		if err := c.cni.GetStatusNetworkList(ctx(t), c.list); err == nil {
			t.Error("STATUS without readiness marker: want an error")
		}
		if err := node.WriteMarker(env.marker, &node.Marker{Version: "test", Binary: pluginDir, Conf: "/etc/cni/net.d/x"}); err != nil {
			t.Fatal(err)
		}
		if err := c.cni.GetStatusNetworkList(ctx(t), c.list); err != nil {
			t.Errorf("STATUS with marker: %v", err)
		}
		valid := []types.GCAttachment{}
		for _, p := range []*pod{meshed, plain, system} {
			valid = append(valid, types.GCAttachment{ContainerID: p.rt.ContainerID, IfName: "eth0"})
		}
		if err := c.cni.GCNetworkList(ctx(t), c.list, &libcni.GCArgs{ValidAttachments: valid}); err != nil {
			t.Errorf("GC: %v", err)
		}
		if got := ours(ruleDump(t, meshed.netns.Path())); len(got) == 0 {
			t.Error("GC removed a live pod's rules")
		}
	}

	if testutils.SpecVersionHasCHECK(o.version) {
		for _, p := range []*pod{meshed, plain, system} {
			if err := c.check(p); err != nil {
				t.Errorf("CHECK %s right after ADD: %v", podName(p), err)
			}
		}
		// Remove our rules behind the plugin's back: CHECK must say so.
		tamper(t, meshed.netns.Path())
		err := c.check(meshed)
		var e *types.Error
		if !errors.As(err, &e) || e.Code != ErrRulesMissing || !strings.Contains(e.Msg, "shop/web-1") {
			t.Errorf("CHECK after removing the rules: got %v, want code %d naming the pod", err, ErrRulesMissing)
		}
	}

	for _, p := range []*pod{meshed, plain, system} {
		if err := c.del(p); err != nil {
			t.Errorf("DEL %s: %v", podName(p), err)
		}
		if got := ours(ruleDump(t, p.netns.Path())); len(got) != 0 {
			t.Errorf("DEL %s left rules via %v", podName(p), got)
		}
		if err := c.del(p); err != nil {
			t.Errorf("second DEL %s: %v", podName(p), err)
		}
	}
}

// checkResult: the chain's result is the primary's, in the config's version.
func checkResult(t *testing.T, o chainOpts, res types.Result) {
	t.Helper()
	if res.Version() != o.version {
		t.Errorf("result version %s, want %s", res.Version(), o.version)
	}
	r, err := current.NewResultFromResult(res)
	if err != nil {
		t.Fatal(err)
	}
	var fams []string
	for _, ip := range r.IPs {
		if ip.Address.IP.To4() != nil {
			fams = append(fams, "v4")
		} else {
			fams = append(fams, "v6")
		}
	}
	want := map[string][]string{"v4": {"v4"}, "v6": {"v6"}, "dual": {"v4", "v6"}}[o.families]
	if !slices.Equal(fams, want) || len(r.Interfaces) == 0 {
		t.Errorf("result IPs %v interfaces %d, want %v from %s", r.IPs, len(r.Interfaces), want, o.primary)
	}
}

// tamper removes our rules from a netns, whatever the backend.
func tamper(t *testing.T, netnsPath string) {
	t.Helper()
	_ = exec.Command("nsenter", "--net="+netnsPath, "nft", "delete", "table", "inet", "mesh_cni").Run()
	for _, tool := range []string{"iptables-legacy", "ip6tables-legacy", "iptables-nft", "ip6tables-nft"} {
		for _, table := range []string{"nat", "mangle"} {
			_ = exec.Command("nsenter", "--net="+netnsPath, tool, "-t", table, "-F").Run()
		}
	}
}
