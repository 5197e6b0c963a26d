package explain

import (
	"bytes"
	"strings"
	"testing"
)

// The command line, its exit codes and its usage errors are tested with
// the command, in cmd/mesh-cnictl; these tests give Explain the Options
// its flags fill in.

// istioStatus is the annotation istio's injector leaves on a pod.
const istioStatus = "sidecar.istio.io/status"

const istioProxy = `{"containers":["istio-proxy"]}`

// explainText runs Explain as the command does: the flags' defaults for
// what o leaves empty, the combination validated first.
func explainText(t *testing.T, o Options) (string, error) {
	t.Helper()
	if o.Format == "" {
		o.Format = NewOptions().Format
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("%+v: %v", o, err)
	}
	var out bytes.Buffer
	_, err := Explain(o, &out)
	return out.String(), err
}

// explainOK is explainText for valid input: any decision, no error.
func explainOK(t *testing.T, o Options) string {
	t.Helper()
	out, err := explainText(t, o)
	if err != nil {
		t.Fatalf("%+v: %v", o, err)
	}
	return out
}

func expect(t *testing.T, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("output lacks %q:\n%s", w, got)
		}
	}
}

func reject(t *testing.T, got string, unwanted ...string) {
	t.Helper()
	for _, w := range unwanted {
		if strings.Contains(got, w) {
			t.Errorf("output has %q:\n%s", w, got)
		}
	}
}

func TestIstioAnnotations(t *testing.T) {
	out := explainOK(t, Options{Family: "ipv4", Annotations: KV{
		istioStatus: istioProxy,
		"traffic.sidecar.istio.io/excludeOutboundIPRanges": "10.0.0.0/8",
		"sidecar.istio.io/interceptionMode":                "TPROXY",
	}})
	expect(t, out, "decision: redirect (mesh istio)", "mode:              TPROXY",
		"# nft -f -\ntable inet mesh_cni", "tproxy ip to :15006",
		"# iptables-restore --noflush\n*nat", "*mangle", "-j TPROXY --on-port 15006",
		"-A MESH_OUTPUT -d 10.0.0.0/8 -m comment --comment \"mesh-cni/skip-subnets\" -j RETURN",
		"ip rule add fwmark 1337 lookup 133")
	reject(t, out, "ip6tables-restore", "ip6 ")
}

func TestFormat(t *testing.T) {
	out := explainOK(t, Options{Profile: "istio", Annotations: KV{istioStatus: istioProxy}, Format: "nft"})
	expect(t, out, "table inet mesh_cni")
	reject(t, out, "iptables-restore")
	out = explainOK(t, Options{Profile: "istio", Annotations: KV{istioStatus: istioProxy}, Format: "iptables"})
	expect(t, out, "# iptables-restore --noflush", "# ip6tables-restore --noflush")
	reject(t, out, "table inet")
}

// A pod manifest: annotations alone cannot decide for linkerd, so the spec
// is read as ADD would, with the proxy's runAsUser and the pod's families.
func TestLinkerdPodManifest(t *testing.T) {
	out := explainOK(t, Options{PodPath: "testdata/linkerd-pod.yaml"})
	expect(t, out, "pod: shop/web-6d4cf56db6-abcde",
		"annotations alone: cannot decide (need-spec, mesh linkerd)",
		"decision: redirect (mesh linkerd)", "families:          ipv4, ipv6", "proxy uid/gid:     2103/none",
		"--uid-owner 2103", "# ip6tables-restore --noflush", "-A MESH_INBOUND -s fd00:10:96::/112",
		"-A MESH_OUTPUT -p tcp --dport 3306", "ip6 saddr fd00:10:96::/112 counter return")
}

// Annotations that need the spec: explain says so, and shows the rules ADD
// applies if the lookup confirms the sidecar.
func TestNeedSpecWithoutPod(t *testing.T) {
	out := explainOK(t, Options{Annotations: KV{"linkerd.io/proxy-version": "x"}, Format: "nft"})
	expect(t, out, "annotations alone: cannot decide (need-spec, mesh linkerd)",
		"decision: needs the pod spec (pass --pod); assuming it runs linkerd-proxy in CNI mode:",
		"decision: redirect (mesh linkerd)", "redirect to :4140")
	out = explainOK(t, Options{Profile: "custom", MeshConfig: `{"sidecar": "envoy", "proxyUID": 101, "inboundPort": 9000, "outboundPort": 9001}`})
	expect(t, out, "assuming it runs envoy in CNI mode", "--uid-owner 101")
}

// Labels never reach ADD from the runtime; they count once the pod is
// looked up.
func TestLabels(t *testing.T) {
	out := explainOK(t, Options{PodPath: "testdata/linkerd-pod.yaml", Labels: KV{"linkerd.io/control-plane-component": "destination"}})
	expect(t, out, "except ports 443,3306,6443", "-A MESH_OUTPUT -p tcp -m multiport --dports 443,3306,6443")
}

// A workload manifest is judged by its pod template.
func TestWorkloadManifest(t *testing.T) {
	const deployment = "testdata/istio-deployment.yaml"
	out := explainOK(t, Options{PodPath: deployment, Family: "ipv4"})
	// By default istio pods are judged from the spec: the proxy's DNS env
	// (a mesh-wide capture) counts, and so does the inbound port list.
	expect(t, out, "pod: bookinfo/reviews-<pod>", "annotations alone: cannot decide", "decision: redirect (mesh istio)",
		"ports 9080,", "--dport 9080", "dns:               tcp/udp 53 to any destination, from every process but the proxy, to port 15053")
	// Trusting the annotations, the env is not seen.
	out = explainOK(t, Options{PodPath: deployment, Profile: "istio", MeshConfig: `{"trustAnnotations": true}`})
	expect(t, out, "decision: redirect (mesh istio)")
	reject(t, out, "annotations alone: cannot decide")
	out = explainOK(t, Options{PodPath: deployment, Profile: "istio", MeshConfig: `{"trustAnnotations": false}`})
	expect(t, out, "annotations alone: cannot decide", "dns:               tcp/udp 53 to any destination, from every process but the proxy, to port 15053")
}

func TestSkips(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{PodPath: "testdata/linkerd-init-pod.json"}, "decision: skip (init-container-mode, mesh linkerd); ADD changes nothing"},
		{Options{PodPath: "testdata/istio-gateway.yaml"}, "decision: skip (not-sidecar, mesh istio)"},
		{Options{Annotations: KV{"app": "web"}}, "decision: skip (no-sidecar)"},
		{Options{Annotations: KV{istioStatus: istioProxy, "sidecar.istio.io/inject": "false"}}, "decision: skip (inject-disabled, mesh istio)"},
	} {
		out := explainOK(t, c.o)
		expect(t, out, c.want)
		reject(t, out, "*nat", "table inet")
	}
}

// --config reads the chain entry through the plugin's parser, from a
// conflist: excluded namespaces, ipv6 off, a custom mesh.
func TestConfig(t *testing.T) {
	const conflist = "testdata/conflist.json"
	out := explainOK(t, Options{ConfigPath: conflist, PodPath: "testdata/linkerd-pod.yaml"})
	expect(t, out, "decision: skip (excluded)")

	out = explainOK(t, Options{ConfigPath: conflist, Annotations: KV{"example.com/proxy": "envoy"}})
	expect(t, out, `"ipv6": false`, "decision: redirect (mesh custom)", "families:          ipv4", "mode:              TPROXY", "--uid-owner 101")
	reject(t, out, "ip6tables-restore")

	out = explainOK(t, Options{ConfigPath: conflist, Annotations: KV{istioStatus: istioProxy}})
	expect(t, out, "decision: skip (no-sidecar)") // istio disabled in the config
}

// A pod-level runAsGroup is the app's group too: it is not exempt.
func TestPodLevelGroup(t *testing.T) {
	out := explainOK(t, Options{PodPath: "testdata/linkerd-pod-group.yaml"})
	expect(t, out, "note: gid 1000 not exempt: shared with container app", "proxy uid/gid:     2102/none", "--uid-owner 2102")
	reject(t, out, "--gid-owner", "skgid")
}

// An app with the proxy's UID is refused, naming the container.
func TestAppWithProxyUID(t *testing.T) {
	_, err := explainText(t, Options{PodPath: "testdata/linkerd-pod-proxy-uid.yaml"})
	if err == nil {
		t.Fatal("explain accepted an app running as the proxy's uid")
	}
	expect(t, err.Error(), "container app runs as uid 2102, the proxy's exempt uid")
}

// Kuma and Consul pods are judged by default, each by its contract.
func TestKumaAndConsulPods(t *testing.T) {
	out := explainOK(t, Options{PodPath: "../../testsupport/contract/testdata/kuma/exclusions.yaml", Family: "ipv4"})
	expect(t, out, "decision: redirect (mesh kuma)", "proxy uid/gid:     5678/5678",
		"-A MESH_OUTPUT -m owner --uid-owner 1500 -m comment --comment \"mesh-cni/exempt-uid\" -j RETURN",
		"-A MESH_OUTPUT -p udp --dport 53 -m comment --comment \"mesh-cni/dns\" -j REDIRECT --to-ports 15053")
	out = explainOK(t, Options{PodPath: "../../testsupport/contract/testdata/consul/default.yaml", Family: "ipv4"})
	expect(t, out, "decision: redirect (mesh consul)", "--uid-owner 5995", "--to-ports 20000",
		"-A MESH_OUTPUT -p udp -d 127.0.0.1/32 --dport 53")
}

// The summary says what the rules do: Kuma captures UDP only, after its
// excluded destinations and UIDs, and ADD redirects IPv6 on a pod whose
// status lists IPv4 only (eth0's link-local), with ::6 on lo.
func TestKumaSummary(t *testing.T) {
	out := explainOK(t, Options{Profile: "kuma", PodPath: "testdata/kuma-pod.yaml", Format: "nft"})
	expect(t, out, "decision: redirect (mesh kuma)", "families:          ipv4, ipv6",
		"exempt uids:       2000-2999 tcp ports 22,443 (outbound not redirected; before DNS capture and the proxy's path to its own pod)",
		"dns:               udp 53 to any destination except the skipped subnets, from every process but the proxy, to port 15053",
		"drop invalid:      conntrack INVALID packets dropped (mangle PREROUTING)",
		"lo addresses:      ::6/128", "ip addr add ::6/128 dev lo", "ct state invalid counter drop")
	reject(t, out, "tcp/udp 53")
	out = explainOK(t, Options{Profile: "kuma", PodPath: "testdata/kuma-pod.yaml", Family: "ipv4", Format: "nft"})
	reject(t, out, "::6", "ip6 ")
}

// Consul's DNS goes to its local resolver only, from every process, the
// dataplane too; its init container's UID is exempt.
func TestConsulSummary(t *testing.T) {
	out := explainOK(t, Options{Profile: "consul", PodPath: "testdata/consul-pod.yaml", Format: "nft"})
	expect(t, out, "decision: redirect (mesh consul)", "families:          ipv4",
		"exempt uids:       5996 (outbound not redirected; DNS capture still applies)",
		"dns:               tcp/udp 53 to 127.0.0.1/32, from every process, the proxy too, to port 8600")
	reject(t, out, "lo addresses", "families:          ipv4, ipv6")
}
