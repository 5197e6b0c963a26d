package contract

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// deliberate lists where mesh-cni differs from istio-cni on purpose, by
// pod and probe ("ADD" for the setup itself), with the reason. A
// difference not listed fails the test.
var deliberate = map[[2]string]string{
	{"edge-interception-none", "ADD"}: "istio-cni fails ADD on interceptionMode NONE (its NewRedirect accepts REDIRECT and TPROXY only); mesh-cni leaves the pod unredirected, which is what NONE asks for (internal/mesh/README.md)",
}

// diffPod is one pod of the comparison.
type diffPod struct {
	name string
	pod  *corev1.Pod
	img  map[string]Image
}

// loadDiffPods loads fixture files as pods of the comparison, each named
// after its file.
func loadDiffPods(t *testing.T, files ...string) []diffPod {
	t.Helper()
	var out []diffPod
	for _, f := range files {
		kp, img, err := loadFixture(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, diffPod{strings.TrimSuffix(filepath.Base(f), ".yaml"), kp, img})
	}
	return out
}

// diffPods are the injector's goldens and hand-made edge cases derived
// from them: what the goldens do not cover.
func diffPods(t *testing.T, files []string) []diffPod {
	t.Helper()
	out := loadDiffPods(t, files...)
	load := func(f string) diffPod { return loadDiffPods(t, f)[0] }
	edge := func(base, name string, ann map[string]string, env map[string]string) {
		d := load("testdata/istio/" + base + ".yaml")
		d.name, d.pod.Name = name, name
		for k, v := range ann {
			d.pod.Annotations[k] = v
		}
		for i, c := range d.pod.Spec.Containers {
			if c.Name != "istio-proxy" {
				continue
			}
			for k, v := range env {
				d.pod.Spec.Containers[i].Env = append(d.pod.Spec.Containers[i].Env, corev1.EnvVar{Name: k, Value: v})
			}
		}
		out = append(out, d)
	}
	const ann = "traffic.sidecar.istio.io/"
	edge("default", "edge-include-ports-no-ranges", map[string]string{ann + "includeOutboundIPRanges": "", ann + "includeOutboundPorts": "5432"}, nil)
	edge("default", "edge-narrow-ranges", map[string]string{ann + "includeOutboundIPRanges": "198.19.7.0/24", ann + "excludeOutboundPorts": "5432"}, nil)
	edge("default", "edge-inbound-excludes", map[string]string{ann + "excludeInboundPorts": "15020,8080,9090"}, nil)
	edge("default", "edge-narrow-inbound", map[string]string{ann + "includeInboundPorts": "9090", ann + "excludeOutboundPorts": "5432,15020"}, nil)
	edge("default", "edge-interception-none", map[string]string{"sidecar.istio.io/interceptionMode": "NONE"}, nil)
	edge("default", "edge-dual-stack", map[string]string{ann + "excludeOutboundPorts": "5432"}, map[string]string{"ISTIO_DUAL_STACK": "true"})
	edge("dns-capture", "edge-dual-stack-dns", nil, map[string]string{"ISTIO_DUAL_STACK": "true"})
	edge("tproxy", "edge-tproxy-dns", map[string]string{ann + "excludeOutboundPorts": "5432"}, map[string]string{"ISTIO_META_DNS_CAPTURE": "true"})
	// Excluded ports are returned for TCP and UDP before DNS capture
	// (tools/istio-iptables/pkg/capture/run.go:282-288): 53 among them
	// leaves DNS uncaptured.
	edge("dns-capture", "edge-exclude-dns-port", map[string]string{ann + "excludeOutboundPorts": "53,5432"}, nil)
	edge("default", "edge-exclude-dns-port-no-capture", map[string]string{ann + "excludeOutboundPorts": "53,5432"}, nil)
	return out
}

// TestIstioDifferential sets every Istio fixture pod up in fresh network
// namespaces: with Istio's own plugin (istio-cni, built from the module
// hack/istio pins, reading the pod from a real kube-apiserver) in both its
// modes, iptables and nftables (native_nftables, which Istio's chart sets
// from global.nativeNftables), and with mesh-cni (each backend), and
// compares where each probe lands: outbound TCP from every app identity,
// the proxy's and root's, to the peer, its excluded and included ports and
// ranges, loopback and the pod's own address; UDP and TCP to the peer's
// port 53 and excluded ports; inbound from the peer to the app, excluded
// and the proxy's ports. IPv4 only: istio-cni programs IPv6 only with
// ISTIO_DUAL_STACK, which mesh-cni does not need (docs/istio.md).
func TestIstioDifferential(t *testing.T) {
	testenv.NeedRoot(t)
	files := fixtures(t, "testdata/istio/*.yaml")
	env, istioDir, plugins, runDir := istioRig(t)
	run := newDiffRun("istio-cni", deliberate)
	pods := diffPods(t, files)
	for _, d := range pods {
		name, kp := d.name, d.pod
		w := d.promise(t)
		if w.refused != "" {
			run.note(name, fmt.Sprintf("%s: not compared: mesh-cni refuses ADD (container %s pinned to the proxy's UID), istio-cni does not", name, w.refused))
			continue
		}
		// Each pod's sides are set up in netns of their own: the pods
		// run in parallel, each probe's wait next to the others'.
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			createPod(t, env, kp)
			dual := proxyEnv(kp, "ISTIO_DUAL_STACK") == "true"
			ours := map[string]map[string]string{}
			oerr := map[string]error{}
			for _, bname := range backends {
				ours[bname], oerr[bname] = landings(t, w, dual, func(tp *testenv.Topo) error {
					return meshAdd(t, tp, kp, plugins, bname)
				})
			}
			for _, mode := range istioModes {
				istio, ierr := landings(t, w, dual, func(tp *testenv.Topo) error {
					return istioAdd(tp, kp, istioDir, runDir, mode == "nftables")
				})
				for _, bname := range backends {
					run.compare(t, name, bname+" vs istio-cni "+mode, istio, ierr, ours[bname], oerr[bname])
				}
			}
		})
	}
	// Once every pod's subtest is done.
	t.Cleanup(func() {
		seen := run.seen(t, []string{"proxy:15001", "proxy:15006", "proxy:15053", "app:*", "peer:*", "no answer:*"}, "no answer:*")
		t.Logf("istio-cni (iptables, nftables) vs mesh-cni (nftables, iptables-nft): %d pods, %d landings compared, %d the same; istio-cni's landings: %s\n%s",
			len(pods), run.total, run.same, seen, run.lines(pods))
	})
}

// istioCNIDir is $MESH_CNI_ISTIO_BIN_DIR, else where hack/build-istio.sh
// builds (or finds cached) istio-cni.
func istioCNIDir(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("MESH_CNI_ISTIO_BIN_DIR"); dir != "" {
		return dir
	}
	var out bytes.Buffer
	cmd := exec.Command("bash", "../../../hack/build-istio.sh", "istio-cni")
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("hack/build-istio.sh istio-cni: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	return lines[len(lines)-1]
}

// istioRig is what the tests against istio-cni share: istio-cni built
// (istioCNIDir), a real API server it reads pods from, its kubeconfig
// under runDir where istio-cni looks for it, mesh-cni's plugins and the
// test proxy.
func istioRig(t *testing.T) (env *testenv.Env, istioDir, plugins, runDir string) {
	t.Helper()
	istioDir = istioCNIDir(t)
	env = testenv.Start(t)
	plugins = testenv.PluginDir(t)
	testenv.TestProxy(t)
	runDir = t.TempDir()
	if err := os.Symlink(env.Kubeconfig, filepath.Join(runDir, "istio-cni-kubeconfig")); err != nil {
		t.Fatal(err)
	}
	return env, istioDir, plugins, runDir
}

// promise gives the pod the UID diffRuntime names it by and returns what
// it is promised.
func (d diffPod) promise(t *testing.T) *promise {
	t.Helper()
	d.pod.UID = k8stypes.UID(d.pod.Name + "-uid")
	w, err := promised(d.pod, d.img)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// createPod puts the fixture pod (and its namespace) in the API server,
// where istio-cni reads it.
func createPod(t *testing.T, env *testenv.Env, kp *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	_, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kp.Namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := env.Client.CoreV1().ServiceAccounts(kp.Namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	p := kp.DeepCopy()
	p.ResourceVersion, p.UID = "", ""
	_ = env.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	if _, err := env.Client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s/%s: %v", p.Namespace, p.Name, err)
	}
}

// istioModes are istio-cni's ways of writing the rules: iptables-restore,
// or nft with native_nftables (cni/pkg/plugin/plugin.go:198, the rules of
// tools/istio-nftables/pkg/capture/run.go).
var istioModes = []string{"iptables", "nftables"}

// istioAdd runs istio-cni's ADD as Istio's installer chains it for
// sidecar mode (cni/pkg/install/cniconfig.go), iptables or nftables mode.
func istioAdd(tp *testenv.Topo, kp *corev1.Pod, dir, runDir string, nftables bool) error {
	b, _ := json.Marshal(istioConf(tp, runDir, nftables))
	conf, err := libcni.NetworkPluginConfFromBytes(b)
	if err != nil {
		return err
	}
	cni := libcni.NewCNIConfigWithCacheDir([]string{dir}, tp.Dir(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Timeout())
	defer cancel()
	_, err = cni.AddNetwork(ctx, conf, diffRuntime(tp, kp))
	return err
}

// istioConf is istio-cni's entry as Istio's installer writes it for
// sidecar mode, with the primary's result.
func istioConf(tp *testenv.Topo, runDir string, nftables bool) map[string]any {
	return map[string]any{
		"cniVersion": "1.0.0", "name": "diff", "type": "istio-cni",
		"plugin_log_level": "error", "cni_agent_run_dir": runDir, "ambient_enabled": false,
		"enablement_selectors": []any{}, "exclude_namespaces": []string{"kube-system"},
		"pod_namespace": "istio-system", "native_nftables": nftables,
		"prevResult": diffPrevResult(tp),
	}
}

func proxyEnv(kp *corev1.Pod, name string) string {
	for _, c := range kp.Spec.Containers {
		if c.Name == "istio-proxy" {
			for _, e := range c.Env {
				if e.Name == name {
					return e.Value
				}
			}
		}
	}
	return ""
}
