package contract

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os/exec"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	corev1 "k8s.io/api/core/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/mesh-cni/mesh-cni/internal/backend"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// chainOrders are the orders in which the primary's conflist holds both
// entries (istio.io/istio at the version hack/istio pins):
//   - window: ours, then istio-cni's. Istio's install-cni appends its entry
//     last (cni/pkg/install/cniconfig.go:280-291, insertCNIConfig) while
//     the agent migrates from it (migrateFrom) or hands back to it
//     (handBackTo), until the agent's next write takes one of them out.
//   - kept: istio-cni's, then ours. The agent appends ours after an
//     istio-cni entry it was not told to replace (TestOtherMeshKeptWithoutMigrateFrom);
//     Istio's installer then leaves its entry where it is, as it only checks
//     that one exists (cni/pkg/install/install.go:369-371).
var chainOrders = []struct {
	name      string
	meshFirst bool
}{{"window", true}, {"kept", false}}

// bothDiffer lists where a pod set up by both plugins lands elsewhere than
// with mesh-cni alone, as measured, with the reason. A difference not
// listed fails the test.
var bothDiffer = map[[2]string]string{
	{"edge-interception-none", "ADD"}: "istio-cni fails ADD on interceptionMode NONE (its NewRedirect accepts REDIRECT and TPROXY only), so the chain fails whatever runs first; the runtime retries the sandbox",
}

// TestIstioBothPlugins sets every Istio pod of TestIstioDifferential up in
// fresh network namespaces with both plugins in one chain, as a pod gets
// them while both entries are in the primary's conflist: libcni runs the
// list (mesh-cni with each backend, istio-cni in each mode, in each order
// of chainOrders; the kept order on the goldens only), each plugin
// getting the result of the one before it. Every probe must land where it
// lands with mesh-cni alone (same backend), but for what
// savedMarkBlackholes measured. Then DEL of the list (reverse order, as
// libcni runs it) must leave none of our rules or policy routes. Where a
// pod's landings differ, the rules in its netns are logged.
func TestIstioBothPlugins(t *testing.T) {
	testenv.NeedRoot(t)
	files := fixtures(t, "testdata/istio/*.yaml")
	env, istioDir, plugins, runDir := istioRig(t)
	run := newDiffRun("both plugins", bothDiffer)
	pods := diffPods(t, files)
	for _, d := range pods {
		name, kp := d.name, d.pod
		w := d.promise(t)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			createPod(t, env, kp)
			dual := proxyEnv(kp, "ISTIO_DUAL_STACK") == "true"
			cni := libcni.NewCNIConfigWithCacheDir([]string{plugins, istioDir}, t.TempDir(), nil)
			for _, bname := range backends {
				alone, aerr := landings(t, w, dual, func(tp *testenv.Topo) error {
					return meshAdd(t, tp, kp, plugins, bname)
				})
				for _, mode := range istioModes {
					for _, order := range chainOrders {
						if !order.meshFirst && strings.HasPrefix(name, "edge-") {
							// The kept order, outside any migration,
							// on the goldens only: the edge cases'
							// annotations meet the same hooks, and
							// edge-tproxy-dns would wait out 30 more
							// connect timeouts (about 60 s).
							continue
						}
						label := fmt.Sprintf("%s: mesh-cni %s, istio-cni %s", order.name, bname, mode)
						if !order.meshFirst {
							label = fmt.Sprintf("%s: istio-cni %s, mesh-cni %s", order.name, mode, bname)
						}
						var tp *testenv.Topo
						var list *libcni.NetworkConfigList
						both, berr := landings(t, w, dual, func(p *testenv.Topo) error {
							tp = p
							list = bothList(t, p, kp, bname, runDir, mode == "nftables", order.meshFirst)
							ctx, cancel := context.WithTimeout(context.Background(), testenv.Timeout())
							defer cancel()
							if _, err := cni.AddNetworkList(ctx, list, diffRuntime(p, kp)); err != nil {
								return err
							}
							bothRan(t, p, name+"/"+label)
							return nil
						})
						want := alone
						if savedMarkBlackholes(w, order.meshFirst, bname, mode) {
							want = blackholedOverEth0(alone)
							label += " (expected: mesh-cni alone, but TCP over eth0 without answer)"
						}
						run.compare(t, name, label, both, berr, want, aerr)
						_, listed := run.reason(name, "ADD")
						if ((berr == nil) != (aerr == nil) && !listed) || (berr == nil && aerr == nil && !maps.Equal(both, want)) {
							t.Logf("%s/%s: the pod netns's rules:\n%s", name, label, netnsRules(tp))
						}
						delBoth(t, cni, list, tp, kp, label)
					}
				}
			}
		})
	}
	t.Cleanup(func() {
		seen := run.seen(t, []string{"proxy:15001", "proxy:15006", "proxy:15053", "app:*", "peer:*", "no answer:*"}, "no answer:*")
		t.Logf("both plugins in one chain (orders %s) vs mesh-cni alone: %d pods, %d landings compared, %d the same; the chain's landings: %s\n%s",
			orderNames(), len(pods), run.total, run.same, seen, run.lines(pods))
	})
}

// savedMarkBlackholes says whether a TPROXY pod's TCP over eth0 goes
// unanswered with both plugins in this order: measured, and why.
//
// Each plugin's mangle PREROUTING marks a new inbound connection 1337 as
// it TPROXYs it and every packet of an established one as it diverts it,
// and accepts. A reply takes "fwmark 1337 lookup 133" (local default dev
// lo) when its connection's conntrack mark is 1337. Istio's chain saves
// the mark to conntrack for a packet that comes to it marked
// (tools/istio-iptables/pkg/capture/run.go:412-414, "-m mark --mark 1337
// -j CONNMARK --save-mark" after the jump to ISTIO_INBOUND, whose first
// rule returns marked packets: lines 435-437; tools/istio-nftables/pkg/
// capture/run.go:525-531 and 576-581 the same), and its mangle OUTPUT
// restores it (iptables run.go:432-434, nftables run.go:571-575). Base
// chains of one hook and priority (mangle, -150) run newest first (the
// kernel's nf_hook_entries_grow puts a hook before those of equal
// priority), so the plugin whose ADD ran last marks the packet and the
// other one sees it marked. When the other one is istio-cni (the kept
// order), it saves the mark: the replies of every TCP connection through
// eth0 (inbound to the proxy, and the proxy's and excluded traffic out)
// are routed to lo and lost. mesh-cni saves the mark only for packets
// from lo (internal/rules tproxyChains), so the window order, where
// istio-cni's chain is the newer, behaves as mesh-cni alone. Where both
// write into iptables-nft's one mangle PREROUTING chain (mesh-cni's
// iptables-nft backend, istio-cni's iptables mode), the first jump's
// ACCEPT ends it and the other's rules never see the packet.
func savedMarkBlackholes(w *promise, meshFirst bool, bname, mode string) bool {
	return w.tproxy && !meshFirst && !(bname == backend.IptablesNFT && mode == "iptables")
}

// blackholedOverEth0 is alone with every TCP connection through eth0
// unanswered: inbound ones the proxy takes, and outbound ones that reach
// the peer directly.
func blackholedOverEth0(alone map[string]string) map[string]string {
	out := maps.Clone(alone)
	for k, v := range alone {
		if strings.Contains(k, " udp ") {
			continue
		}
		if (strings.HasPrefix(k, "peer ") && v == "proxy:15006") || (!strings.HasPrefix(k, "peer ") && strings.HasPrefix(v, "peer:")) {
			out[k] = "no answer"
		}
	}
	return out
}

// bothList is the primary's conflist while it holds both entries, without
// the primary: the first entry carries the primary's result as prevResult,
// which libcni leaves in place, and passes its own result to the second.
func bothList(t *testing.T, tp *testenv.Topo, kp *corev1.Pod, bname, runDir string, nftables, meshFirst bool) *libcni.NetworkConfigList {
	t.Helper()
	p := kp.DeepCopy()
	p.UID = k8stypes.UID(kp.Name + "-uid")
	var ours map[string]any
	if err := json.Unmarshal(pluginConf(t, tp, bname, serveAgent(t, p), false).Bytes, &ours); err != nil {
		t.Fatal(err)
	}
	theirs := istioConf(tp, runDir, nftables)
	entries := []map[string]any{ours, theirs}
	if !meshFirst {
		entries = []map[string]any{theirs, ours}
	}
	delete(entries[1], "prevResult")
	b, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "both", "plugins": entries})
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.NetworkConfFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// bothRan fails t unless the pod netns holds both plugins' rules after
// the chain's ADD.
func bothRan(t *testing.T, tp *testenv.Topo, label string) {
	t.Helper()
	rules := nsRun(tp, "nft list ruleset")
	for plugin, marks := range map[string][]string{"mesh-cni": {"mesh_cni", "chain MESH_"}, "istio-cni": {"chain ISTIO_", "table inet istio-"}} {
		if !strings.Contains(rules, marks[0]) && !strings.Contains(rules, marks[1]) {
			t.Errorf("%s: the chain's ADD succeeded but the pod netns holds no %s rules:\n%s", label, plugin, rules)
		}
	}
}

// delBoth runs the list's DEL (reverse order) as the runtime does after
// ADD, failed or not, and fails if any of our rules or policy routes stay.
// istio-cni's DEL removes nothing (cni/pkg/plugin/plugin.go CmdDelete):
// its rules stay.
func delBoth(t *testing.T, cni *libcni.CNIConfig, list *libcni.NetworkConfigList, tp *testenv.Topo, kp *corev1.Pod, label string) {
	t.Helper()
	if tp == nil {
		return // the topology failed before ADD: landings has failed t
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Timeout())
	defer cancel()
	if err := cni.DelNetworkList(ctx, list, diffRuntime(tp, kp)); err != nil {
		t.Errorf("%s/%s: DEL: %v", kp.Name, label, err)
	}
	noRules(t, tp)
	for _, cmd := range []string{"ip -4 rule show", "ip -6 rule show", "ip -4 route show table all proto 109", "ip -6 route show table all proto 109"} {
		out := nsRun(tp, cmd)
		if strings.Contains(out, "proto 109") || (strings.Contains(cmd, "route") && strings.TrimSpace(out) != "") {
			t.Errorf("%s/%s: after DEL, %s shows our policy routing:\n%s", kp.Name, label, cmd, out)
		}
	}
}

// netnsRules is what the pod netns holds: nftables (iptables-nft's tables
// among them), legacy iptables and the policy routes.
func netnsRules(tp *testenv.Topo) string {
	if tp == nil {
		return "(no netns)"
	}
	var b strings.Builder
	for _, cmd := range []string{"nft list ruleset", "iptables-legacy-save", "ip -4 rule show", "ip -4 route show table all"} {
		fmt.Fprintf(&b, "# %s\n%s\n", cmd, nsRun(tp, cmd))
	}
	return b.String()
}

func nsRun(tp *testenv.Topo, cmd string) string {
	out, err := exec.Command("nsenter", append([]string{"--net=" + tp.Pod.Path()}, strings.Fields(cmd)...)...).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%s: %v\n%s", cmd, err, out)
	}
	return string(out)
}

func orderNames() string {
	var out []string
	for _, o := range chainOrders {
		out = append(out, o.name)
	}
	return strings.Join(out, ", ")
}
