package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/testutils"

	"github.com/mesh-cni/mesh-cni/internal/rules"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// ruleCheck is how to see a chain's redirect in a pod's netns: a command
// run there (under nsenter --net) whose output must hold every string of
// want.
type ruleCheck struct {
	cmd  []string
	want []string
	// gone: DEL removes the rules, so after it the output holds none of
	// want (mesh-cni). Istio's DEL does nothing: its rules go with the netns.
	gone bool
}

// The checks of each chain. The strings are a chain of the rule set that
// only the plugin under test writes, and the redirect to Envoy's outbound
// port (the pod from Istio's injector redirects outbound to 15001).
var (
	checkMeshNft = &ruleCheck{cmd: []string{"nft", "list", "table", rules.NftFamily, rules.NftTable},
		want: []string{"table " + rules.NftFamily + " " + rules.NftTable, "redirect to :15001"}, gone: true}
	checkMeshIptNft = &ruleCheck{cmd: []string{"iptables-nft-save", "-t", "nat"},
		want: []string{"-A " + rules.ChainOutput, "--to-ports 15001"}, gone: true}
	checkMeshIptLegacy = &ruleCheck{cmd: []string{"iptables-legacy-save", "-t", "nat"},
		want: []string{"-A " + rules.ChainOutput, "--to-ports 15001"}, gone: true}
	checkNaive = &ruleCheck{cmd: []string{"iptables-nft-save", "-t", "nat"},
		want: []string{"-A " + rules.ChainOutput, "--to-ports 15001"}}
	// Istio's iptables mode picks iptables-nft in a netns with no legacy
	// rules (istio-iptables DetectIptablesVersion), as here.
	checkIstioIpt = &ruleCheck{cmd: []string{"iptables-nft-save", "-t", "nat"},
		want: []string{"-A ISTIO_REDIRECT", "--to-ports 15001"}}
	checkIstioNft = &ruleCheck{cmd: []string{"nft", "list", "ruleset"},
		want: []string{"table inet istio-proxy-nat", "chain istio-redirect", "redirect to :15001"}}
)

func (rc *ruleCheck) String() string {
	return "`" + strings.Join(rc.cmd, " ") + "` shows " + strings.Join(rc.want, ", ")
}

// run returns what the check's command prints in netns; a command that
// fails (nft listing a table that is not there) returns its error.
func (rc *ruleCheck) run(netns string) (string, error) {
	out, err := exec.Command("nsenter", append([]string{"--net=" + netns}, rc.cmd...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", strings.Join(rc.cmd, " "), err, out)
	}
	return string(out), nil
}

// probe ADDs the probe pod through chain c in a netns of its own, requires
// its rules there, DELs it, and, for a plugin whose DEL removes its rules,
// requires them gone. A chain that writes nothing the check can see would
// time nothing worth timing: the benchmark stops.
func probe(binDir string, c chain, idx int, annotations map[string]string) error {
	if c.check == nil {
		return nil
	}
	dataDir, err := os.MkdirTemp("", "mesh-cni-bench-ipam-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dataDir)
	cacheDir, err := os.MkdirTemp("", "mesh-cni-bench-cache-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(cacheDir)
	netns, err := testutils.NewNS()
	if err != nil {
		return err
	}
	defer func() {
		_ = testenv.RemoveNS(netns)
	}()
	list := conflist(c, fmt.Sprintf("probe%d", idx), fmt.Sprintf("198.18.%d.0/24", idx), dataDir)
	cni := libcni.NewCNIConfigWithCacheDir([]string{binDir, refPlugins}, cacheDir, nil)
	rt := runtimeConf(fmt.Sprintf("probe%02d", idx), netns.Path(), probePod, annotations)
	ctx := context.Background()
	if _, err := cni.AddNetworkList(ctx, list, rt); err != nil {
		return fmt.Errorf("%s: probe ADD: %w", c.name, err)
	}
	out, err := c.check.run(netns.Path())
	if err != nil {
		_ = cni.DelNetworkList(ctx, list, rt)
		return fmt.Errorf("%s: after ADD: %w", c.name, err)
	}
	for _, w := range c.check.want {
		if !strings.Contains(out, w) {
			_ = cni.DelNetworkList(ctx, list, rt)
			return fmt.Errorf("%s: after ADD, %s lacks %q; the pod's netns holds:\n%s", c.name, strings.Join(c.check.cmd, " "), w, out)
		}
	}
	if err := cni.DelNetworkList(ctx, list, rt); err != nil {
		return fmt.Errorf("%s: probe DEL: %w", c.name, err)
	}
	if c.check.gone {
		out, err := c.check.run(netns.Path())
		for _, w := range c.check.want {
			if err != nil {
				break // nothing to list: the table is gone
			}
			if strings.Contains(out, w) {
				return fmt.Errorf("%s: after DEL, %s still shows %q:\n%s", c.name, strings.Join(c.check.cmd, " "), w, out)
			}
		}
	}
	return nil
}
