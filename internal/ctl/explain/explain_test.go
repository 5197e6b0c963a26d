package explain

import (
	"bytes"
	"strings"
	"testing"
)

func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(args, &out, &errb)
	return code, out.String(), errb.String()
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
	code, out, errs := run(t,
		"--annotation", `sidecar.istio.io/status={"containers":["istio-proxy"]}`,
		"--annotation", "traffic.sidecar.istio.io/excludeOutboundIPRanges=10.0.0.0/8",
		"--annotation", "sidecar.istio.io/interceptionMode=TPROXY",
		"--family", "ipv4")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	expect(t, out, "decision: redirect (mesh istio)", "mode:              TPROXY",
		"# nft -f -\ntable inet mesh_cni", "tproxy ip to :15006",
		"# iptables-restore --noflush\n*nat", "*mangle", "-j TPROXY --on-port 15006",
		"-A MESH_OUTPUT -d 10.0.0.0/8 -m comment --comment \"mesh-cni/skip-subnets\" -j RETURN",
		"ip rule add fwmark 1337 lookup 133")
	reject(t, out, "ip6tables-restore", "ip6 ")
}

func TestFormat(t *testing.T) {
	_, out, _ := run(t, "--profile", "istio", "--annotation", `sidecar.istio.io/status={"containers":["istio-proxy"]}`, "--format", "nft")
	expect(t, out, "table inet mesh_cni")
	reject(t, out, "iptables-restore")
	_, out, _ = run(t, "--profile", "istio", "--annotation", `sidecar.istio.io/status={"containers":["istio-proxy"]}`, "--format", "iptables")
	expect(t, out, "# iptables-restore --noflush", "# ip6tables-restore --noflush")
	reject(t, out, "table inet")
}

// A pod manifest: annotations alone cannot decide for linkerd, so the spec
// is read as ADD would, with the proxy's runAsUser and the pod's families.
func TestLinkerdPodManifest(t *testing.T) {
	code, out, errs := run(t, "--pod", "testdata/linkerd-pod.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	expect(t, out, "pod: shop/web-6d4cf56db6-abcde",
		"annotations alone: cannot decide (need-spec, mesh linkerd)",
		"decision: redirect (mesh linkerd)", "families:          ipv4, ipv6", "proxy uid/gid:     2103/none",
		"--uid-owner 2103", "# ip6tables-restore --noflush", "-A MESH_INBOUND -s fd00:10:96::/112",
		"-A MESH_OUTPUT -p tcp --dport 3306", "ip6 saddr fd00:10:96::/112 counter return")
}

// Annotations that need the spec: explain says so, and shows the rules ADD
// applies if the lookup confirms the sidecar.
func TestNeedSpecWithoutPod(t *testing.T) {
	_, out, _ := run(t, "--annotation", "linkerd.io/proxy-version=x", "--format", "nft")
	expect(t, out, "annotations alone: cannot decide (need-spec, mesh linkerd)",
		"decision: needs the pod spec (pass --pod); assuming it runs linkerd-proxy in CNI mode:",
		"decision: redirect (mesh linkerd)", "redirect to :4140")
	_, out, _ = run(t, "--profile", "custom", "--mesh-config", `{"sidecar": "envoy", "proxyUID": 101, "inboundPort": 9000, "outboundPort": 9001}`)
	expect(t, out, "assuming it runs envoy in CNI mode", "--uid-owner 101")
}

// Labels never reach ADD from the runtime; they count once the pod is
// looked up.
func TestLabels(t *testing.T) {
	_, out, _ := run(t, "--pod", "testdata/linkerd-pod.yaml", "--label", "linkerd.io/control-plane-component=destination")
	expect(t, out, "except ports 443,3306,6443", "-A MESH_OUTPUT -p tcp -m multiport --dports 443,3306,6443")
}

// A workload manifest is judged by its pod template.
func TestWorkloadManifest(t *testing.T) {
	code, out, errs := run(t, "--pod", "testdata/istio-deployment.yaml", "--family", "ipv4")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	// By default istio pods are judged from the spec: the proxy's DNS env
	// (a mesh-wide capture) counts, and so does the inbound port list.
	expect(t, out, "pod: bookinfo/reviews-<pod>", "annotations alone: cannot decide", "decision: redirect (mesh istio)",
		"ports 9080,", "--dport 9080", "dns:               tcp/udp 53 to any destination, from every process but the proxy, to port 15053")
	// Trusting the annotations, the env is not seen.
	code, out, _ = run(t, "--pod", "testdata/istio-deployment.yaml", "--profile", "istio", "--mesh-config", `{"trustAnnotations": true}`)
	if code != 0 {
		t.Fatal(out)
	}
	expect(t, out, "decision: redirect (mesh istio)")
	reject(t, out, "annotations alone: cannot decide")
	code, out, _ = run(t, "--pod", "testdata/istio-deployment.yaml", "--profile", "istio", "--mesh-config", `{"trustAnnotations": false}`)
	if code != 0 {
		t.Fatal(out)
	}
	expect(t, out, "annotations alone: cannot decide", "dns:               tcp/udp 53 to any destination, from every process but the proxy, to port 15053")
}

func TestSkips(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--pod", "testdata/linkerd-init-pod.json"}, "decision: skip (init-container-mode, mesh linkerd); ADD changes nothing"},
		{[]string{"--pod", "testdata/istio-gateway.yaml"}, "decision: skip (not-sidecar, mesh istio)"},
		{[]string{"--annotation", "app=web"}, "decision: skip (no-sidecar)"},

		{[]string{"--annotation", `sidecar.istio.io/status={"containers":["istio-proxy"]}`, "--annotation", "sidecar.istio.io/inject=false"}, "decision: skip (inject-disabled, mesh istio)"},
	} {
		code, out, errs := run(t, c.args...)
		if code != 0 {
			t.Errorf("%v: exit %d: %s", c.args, code, errs)
		}
		expect(t, out, c.want)
		reject(t, out, "*nat", "table inet")
	}
}

// --config reads the chain entry through the plugin's parser, from a
// conflist: excluded namespaces, ipv6 off, a custom mesh.
func TestConfig(t *testing.T) {
	_, out, _ := run(t, "--config", "testdata/conflist.json", "--pod", "testdata/linkerd-pod.yaml")
	expect(t, out, "decision: skip (excluded)")

	code, out, errs := run(t, "--config", "testdata/conflist.json", "--annotation", "example.com/proxy=envoy")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	expect(t, out, `"ipv6": false`, "decision: redirect (mesh custom)", "families:          ipv4", "mode:              TPROXY", "--uid-owner 101")
	reject(t, out, "ip6tables-restore")

	_, out, _ = run(t, "--config", "testdata/conflist.json", "--annotation", `sidecar.istio.io/status={"containers":["istio-proxy"]}`)
	expect(t, out, "decision: skip (no-sidecar)") // istio disabled in the config
}

func TestErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--annotation", "linkerd.io/proxy-version=x", "--annotation", "config.linkerd.io/skip-inbound-ports=80,abc", "--profile", "linkerd", "--mesh-config", `{"trustAnnotations": true}`},
			1, `annotation config.linkerd.io/skip-inbound-ports="80,abc": invalid port "abc"`},
		{[]string{"--annotation", `sidecar.istio.io/status={"containers":["istio-proxy"]}`, "--annotation", "traffic.sidecar.istio.io/includeOutboundIPRanges=10.0.0.0/33"},
			1, `includeOutboundIPRanges="10.0.0.0/33": invalid CIDR`},
		{[]string{"--profile", "cilium"}, 1, `unknown mesh profile "cilium"`},
		{[]string{"--profile", "custom"}, 1, "needs sidecar or selectAnnotation"},
		{[]string{"--profile", "linkerd", "--mesh-config", `{"inboundPort": "x"}`}, 1, "--mesh-config"},
		{[]string{"--profile", "linkerd", "--mesh-config", `{"bogus": 1}`}, 1, `unknown field "bogus"`},
		{[]string{"--config", "testdata/nope.json"}, 1, "no such file"},
		{[]string{"--config", "testdata/linkerd-pod.yaml"}, 1, "linkerd-pod.yaml"},
		{[]string{"--pod", "testdata/conflist.json"}, 0, "decision: skip (no-sidecar)"}, // a conflist is no pod, but parses as an empty one
		{[]string{"--family", "ipv5"}, 1, `--family "ipv5"`},
		{[]string{"--format", "yaml"}, 2, "--format"},
		{[]string{"--profile", "istio", "--config", "x"}, 2, "exclude each other"},
		{[]string{"--mesh-config", "{}"}, 2, "needs --profile"},
		{[]string{"--annotation", "novalue"}, 2, "KEY=VALUE"},
		{[]string{"extra"}, 2, `unexpected argument "extra"`},
	} {
		code, out, errs := run(t, c.args...)
		if code != c.code || !strings.Contains(out+errs, c.want) {
			t.Errorf("%v: exit %d, want %d with %q; stdout:\n%s\nstderr:\n%s", c.args, code, c.code, c.want, out, errs)
		}
	}
	if code, _, errs := run(t, "-h"); code != 0 || !strings.Contains(errs, "usage: mesh-cnictl explain") {
		t.Errorf("-h: %d %s", code, errs)
	}
}

// A pod-level runAsGroup is the app's group too: it is not exempt.
func TestPodLevelGroup(t *testing.T) {
	code, out, errs := run(t, "--pod", "testdata/linkerd-pod-group.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	expect(t, out, "note: gid 1000 not exempt: shared with container app", "proxy uid/gid:     2102/none", "--uid-owner 2102")
	reject(t, out, "--gid-owner", "skgid")
}

// An app with the proxy's UID is refused, naming the container.
func TestAppWithProxyUID(t *testing.T) {
	code, _, errs := run(t, "--pod", "testdata/linkerd-pod-proxy-uid.yaml")
	if code == 0 {
		t.Fatal("explain accepted an app running as the proxy's uid")
	}
	expect(t, errs, "container app runs as uid 2102, the proxy's exempt uid")
}

// Kuma and Consul pods are judged by default, each by its contract.
func TestKumaAndConsulPods(t *testing.T) {
	code, out, errs := run(t, "--pod", "../../testsupport/contract/testdata/kuma/exclusions.yaml", "--family", "ipv4")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	expect(t, out, "decision: redirect (mesh kuma)", "proxy uid/gid:     5678/5678",
		"-A MESH_OUTPUT -m owner --uid-owner 1500 -m comment --comment \"mesh-cni/exempt-uid\" -j RETURN",
		"-A MESH_OUTPUT -p udp --dport 53 -m comment --comment \"mesh-cni/dns\" -j REDIRECT --to-ports 15053")
	code, out, errs = run(t, "--pod", "../../testsupport/contract/testdata/consul/default.yaml", "--family", "ipv4")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	expect(t, out, "decision: redirect (mesh consul)", "--uid-owner 5995", "--to-ports 20000",
		"-A MESH_OUTPUT -p udp -d 127.0.0.1/32 --dport 53")
}

// The summary says what the rules do: Kuma captures UDP only, after its
// excluded destinations and UIDs, and ADD redirects IPv6 on a pod whose
// status lists IPv4 only (eth0's link-local), with ::6 on lo.
func TestKumaSummary(t *testing.T) {
	code, out, errs := run(t, "--profile", "kuma", "--pod", "testdata/kuma-pod.yaml", "--format", "nft")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	expect(t, out, "decision: redirect (mesh kuma)", "families:          ipv4, ipv6",
		"exempt uids:       2000-2999 tcp ports 22,443 (outbound not redirected; before DNS capture and the proxy's path to its own pod)",
		"dns:               udp 53 to any destination except the skipped subnets, from every process but the proxy, to port 15053",
		"drop invalid:      conntrack INVALID packets dropped (mangle PREROUTING)",
		"lo addresses:      ::6/128", "ip addr add ::6/128 dev lo", "ct state invalid counter drop")
	reject(t, out, "tcp/udp 53")
	_, out, _ = run(t, "--profile", "kuma", "--pod", "testdata/kuma-pod.yaml", "--family", "ipv4", "--format", "nft")
	reject(t, out, "::6", "ip6 ")
}

// Consul's DNS goes to its local resolver only, from every process, the
// dataplane too; its init container's UID is exempt.
func TestConsulSummary(t *testing.T) {
	code, out, errs := run(t, "--profile", "consul", "--pod", "testdata/consul-pod.yaml", "--format", "nft")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	expect(t, out, "decision: redirect (mesh consul)", "families:          ipv4",
		"exempt uids:       5996 (outbound not redirected; DNS capture still applies)",
		"dns:               tcp/udp 53 to 127.0.0.1/32, from every process, the proxy too, to port 8600")
	reject(t, out, "lo addresses", "families:          ipv4, ipv6")
}
