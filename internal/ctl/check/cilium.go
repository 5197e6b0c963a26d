package check

//go:generate go run ../../testsupport/ciliumcfg/gen -root ../../..

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Namespaces Cilium's chart is installed in: kube-system (its docs) or its
// own (the cilium CLI's --namespace).
var ciliumNamespaces = []string{"kube-system", "cilium"}

const ciliumName = "Cilium's settings leave room for a sidecar mesh"

// ciliumRule is one cilium-config setting that breaks a sidecar mesh. The
// list is the one Istio's installer refuses (istio.io/istio at the version
// hack/istio/go.mod pins: operator/pkg/apis/validation/validation.go,
// detectCniIncompatibility, L93-148), read with the semantics of the Cilium
// agent v1.20.2 (hack/cilium/go.mod).
type ciliumRule struct {
	setting string                           // what the finding names
	breaks  func(cfg map[string]string) bool // cfg is the ConfigMap's data
	why     string
	fix     string // the Helm value that mends it
}

var ciliumRules = []ciliumRule{
	{
		// validation.go L113-117. With it the agent watches the conf dir and
		// on each change rewrites 05-cilium.conflist from its template
		// (dropping the appended chain entry) and renames every other config
		// to *.cilium_bak (cilium daemon/cmd/cni/config.go: Start L205,
		// watchForDirectoryChanges L265, setupCNIConfFile L296,
		// cleanupOtherCNI L456-488).
		setting: "cni-exclusive=true",
		breaks:  func(cfg map[string]string) bool { return ciliumBool(cfg, "cni-exclusive") },
		why:     "Cilium rewrites its CNI config and renames every other one to *.cilium_bak whenever /etc/cni/net.d changes, so the mesh-cni chain entry keeps disappearing and pods set up while it is gone get no redirect",
		fix:     "cni.exclusive=false",
	},
	{
		// validation.go L123-129 (istio/istio#27619).
		setting: "bpf-lb-sock=true without bpf-lb-sock-hostns-only=true",
		breaks: func(cfg map[string]string) bool {
			return ciliumBool(cfg, "bpf-lb-sock") && !ciliumBool(cfg, "bpf-lb-sock-hostns-only")
		},
		why: "Cilium's socket load balancer turns a Service's address into a backend pod's at connect() inside the pod, " +
			"so the sidecar sees a pod, not the Service, and its routing and policy for the Service are skipped",
		fix: "socketLB.hostNamespaceOnly=true",
	},
	{
		// validation.go L130-145 checks only the pre-1.16 "strict", assuming
		// hostns-only defaults to true since. In v1.20.2 the value is
		// true/false; true turns socket LB on whatever bpf-lb-sock says
		// (cilium pkg/kpr/kpr.go L47-49), and bpf-lb-sock-hostns-only still
		// defaults to false (daemon/cmd/daemon_main.go L269): the chart's
		// kubeProxyReplacement=true alone renders bpf-lb-sock: "false" and
		// breaks the mesh all the same (testdata/cilium-config/kpr.yaml).
		setting: "kube-proxy-replacement without bpf-lb-sock-hostns-only=true",
		breaks: func(cfg map[string]string) bool {
			kpr := strings.TrimSpace(cfg["kube-proxy-replacement"])
			return (kpr == "strict" || ciliumBool(cfg, "kube-proxy-replacement")) && !ciliumBool(cfg, "bpf-lb-sock-hostns-only")
		},
		why: "the kube-proxy replacement turns on Cilium's socket load balancer, which turns a Service's address into a backend pod's " +
			"at connect() inside the pod, so the sidecar sees a pod, not the Service",
		fix: "socketLB.hostNamespaceOnly=true",
	},
}

// ciliumBool reads a boolean setting as the agent does (viper's GetBool:
// strconv.ParseBool; anything else, or no value, is false).
func ciliumBool(cfg map[string]string, key string) bool {
	b, err := strconv.ParseBool(strings.TrimSpace(cfg[key]))
	return err == nil && b
}

// ciliumFindings returns what breaks a sidecar mesh in a cilium-config's
// data, one line per setting with the reason and the fix; the fixes, each
// once, in the rules' order; and notes about settings left alone on
// purpose.
func ciliumFindings(cfg map[string]string) (problems, fixes, notes []string) {
	seen := map[string]bool{}
	for _, r := range ciliumRules {
		if !r.breaks(cfg) {
			continue
		}
		problems = append(problems, fmt.Sprintf("%s: %s (Helm: --set %s)", r.setting, r.why, r.fix))
		if !seen[r.fix] {
			seen[r.fix] = true
			fixes = append(fixes, r.fix)
		}
	}
	// Istio refuses BPF masquerading only with ambient's ztunnel
	// (validation.go L118-122, istio/istio#52208): ambient SNATs kubelet
	// probes to a link-local address. Sidecar redirection lives in the
	// pod's netns and mesh-cni rewrites no probe's source, so it stays.
	if ciliumBool(cfg, "enable-bpf-masquerade") {
		notes = append(notes, "enable-bpf-masquerade=true: fine for sidecars; Istio refuses it only for ambient mode's ztunnel, whose probe SNAT it breaks")
	}
	return problems, fixes, notes
}

// CiliumSettings checks that Cilium, if present, leaves the chain entry
// alone and lets Service traffic reach the sidecar.
func CiliumSettings(ctx context.Context, c *Cluster) Result {
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	for _, ns := range ciliumNamespaces {
		cm, err := c.Client.CoreV1().ConfigMaps(ns).Get(ctx, "cilium-config", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return warn(ciliumName, "cannot read "+ns+"/cilium-config: "+err.Error(), "run as a user who may get configmaps in "+ns)
		}
		problems, fixes, notes := ciliumFindings(cm.Data)
		if len(problems) == 0 {
			r := ok(ciliumName, "Cilium found in "+ns+"; none of the settings that break a sidecar mesh")
			r.Details = notes
			return r
		}
		set := ""
		for _, f := range fixes {
			set += " --set " + f
		}
		return fail(ciliumName, fmt.Sprintf("%s/cilium-config: %d setting(s) break a sidecar mesh", ns, len(problems)),
			"helm upgrade cilium cilium/cilium -n "+ns+" --reuse-values"+set+
				", then restart the agents to read it: kubectl -n "+ns+" rollout restart daemonset/cilium",
			append(problems, notes...)...)
	}
	return ok(ciliumName, "Cilium not found")
}
