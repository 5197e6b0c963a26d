package contract

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	corev1 "k8s.io/api/core/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/mesh-cni/mesh-cni/internal/agent/nodepods"
	"github.com/mesh-cni/mesh-cni/internal/agent/podcache"
	"github.com/mesh-cni/mesh-cni/internal/backend"
	"github.com/mesh-cni/mesh-cni/internal/mesh"
	"github.com/mesh-cni/mesh-cni/internal/node"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// TestMain removes the binaries the netns test builds.
func TestMain(m *testing.M) { testenv.Main(m) }

// TestFixturesInNetns runs every fixture pod through the real plugin's ADD
// as containerd calls it (libcni; the pod's annotations in runtimeConfig,
// the primary plugin's result as prevResult; the pod spec from the agent's
// real pod cache over its unix socket), with each backend, then starts
// processes in the pod's network namespace with exactly the identity the
// kubelet gives each container (Kubelet: UID, primary GID, supplementary
// groups) and checks, over IPv4 and IPv6, what the pod's mesh promises
// (promise): every app container's connection lands at the proxy's
// outbound port with its original destination; the proxy's own connection
// reaches the destination directly; inbound connections land at the
// inbound port; annotated exclusions (ports, ranges, interfaces) and the
// plain-init-container opt-out bypass the proxy; DNS lands at the proxy
// only when the pod captures it. A pod the plugin must refuse (an app
// pinned to the proxy's UID) fails ADD with code 7 and gets no rules.
//
// Each pod runs with the chain entry's defaults (judged from its spec) and
// with trustAnnotations on (judged from the runtime's annotations where they
// decide); the latter is skipped where the docs call that opt-in unsafe for
// the pod. One pod netns per fixture serves every backend and both
// families; DEL between runs must leave none of our rules.
func TestFixturesInNetns(t *testing.T) {
	testenv.NeedRoot(t)
	files := fixtures(t, "testdata/*/*.yaml")
	plugins := testenv.PluginDir(t)
	testenv.TestProxy(t)
	for _, f := range files {
		t.Run(strings.TrimSuffix(strings.TrimPrefix(f, "testdata/"), ".yaml"), func(t *testing.T) {
			t.Parallel()
			fixtureInNetns(t, f, plugins)
		})
	}
}

// appPort is what the peer serves and the pod's app listens on.
const appPort = 8080

var (
	backends = []string{backend.NFTables, backend.IptablesNFT}
	families = []struct {
		name      string
		pod, peer string
	}{{"IPv4", testenv.PodV4, testenv.PeerV4}, {"IPv6", testenv.PodV6, testenv.PeerV6}}
)

func fixtureInNetns(t *testing.T, file, plugins string) {
	kp, img, err := loadFixture(file)
	if err != nil {
		t.Fatal(err)
	}
	w, err := promised(kp, img)
	if err != nil {
		t.Fatal(err)
	}
	tp := testenv.NewTopo(t)
	pr := newProbes(t, tp, w)
	if kp.UID == "" { // the API server's, as the runtime passes it and the cache holds it
		kp.UID = k8stypes.UID(kp.Name + "-uid")
	}
	sock := serveAgent(t, kp)
	cni := libcni.NewCNIConfigWithCacheDir([]string{plugins}, t.TempDir(), nil)
	rt := &libcni.RuntimeConf{
		ContainerID: "c0ffee" + strings.ReplaceAll(kp.Name, "-", ""),
		NetNS:       tp.Pod.Path(),
		IfName:      "eth0",
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", kp.Namespace},
			{"K8S_POD_NAME", kp.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", "c0ffee"},
			{"K8S_POD_UID", string(kp.UID)},
		},
		CapabilityArgs: map[string]any{node.PodAnnotationsCapability: kp.Annotations},
	}
	for _, bname := range backends {
		for _, trust := range []bool{false, true} {
			cfgName := "spec"
			if trust {
				cfgName = "trustAnnotations"
			}
			t.Run(bname+"/"+cfgName, func(t *testing.T) {
				if trust {
					if why := w.trustUnsafe(kp); why != "" {
						t.Skip(why)
					}
				}
				conf := pluginConf(t, tp, bname, sock, trust)
				ctx, cancel := context.WithTimeout(context.Background(), testenv.Timeout())
				defer cancel()
				_, err := cni.AddNetwork(ctx, conf, rt)
				defer func() {
					if err := cni.DelNetwork(ctx, conf, rt); err != nil {
						t.Errorf("DEL: %v", err)
					}
					noRules(t, tp)
				}()
				if w.refused != "" {
					var te *types.Error
					if !errors.As(err, &te) || te.Code != types.ErrInvalidNetworkConfig || !strings.Contains(te.Msg, "container "+w.refused+" ") {
						t.Fatalf("ADD: %v; want code %d naming container %s (it runs as the proxy's uid %d)", err, types.ErrInvalidNetworkConfig, w.refused, w.proxy.id.UID)
					}
					return // the deferred check: no rules
				}
				if err != nil {
					t.Fatalf("ADD with %s: %v", bname, err)
				}
				for _, fam := range families {
					t.Run(fam.name, func(t *testing.T) { pr.run(t, fam.pod, fam.peer) })
				}
			})
		}
	}
}

// trustUnsafe says why trustAnnotations is documented as unsafe for pod
// (internal/mesh/README.md), "" when it is safe. Where the annotations do not
// decide, the plugin reads the spec anyway.
func (w *promise) trustUnsafe(pod *corev1.Pod) string {
	cfg := map[string]mesh.Config{}
	for name, c := range meshes() {
		c.TrustAnnotations = ptr(true)
		cfg[name] = c
	}
	d, err := mesh.Decide(cfg, mesh.Pod{Namespace: pod.Namespace, Name: pod.Name, Annotations: pod.Annotations}, nil)
	switch {
	case err != nil || !d.Meshed:
		return ""
	case d.Spec.ProxyUID != w.proxy.id.UID:
		return fmt.Sprintf("the annotations take the proxy to run as uid %d, it runs as %d: trustAnnotations is documented as unsafe here", d.Spec.ProxyUID, w.proxy.id.UID)
	case w.refused != "":
		return "without the spec an app pinned to the proxy's UID cannot be refused: trustAnnotations is documented as unsafe here"
	case w.captureDNS && w.mesh == mesh.Istio:
		return "DNS capture is in the proxy's env, not the annotations: trustAnnotations is documented to need captureDNS in the chain entry"
	}
	return ""
}

// serveAgent serves pod from the agent's pod cache (podcache) on a unix
// socket, as the node agent does: the informer's slimmed copy (nodepods.Slim)
// through the cache's own handler. The informer is not run: its store is
// filled with the pod the API would list.
func serveAgent(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	inf := cache.NewSharedIndexInformer(&cache.ListWatch{}, &corev1.Pod{}, 0, cache.Indexers{})
	slim, err := nodepods.Slim(pod.DeepCopy())
	if err == nil {
		err = inf.GetStore().Add(slim)
	}
	if err != nil {
		t.Fatal(err)
	}
	c := podcache.NewShared(nil, inf)
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := podcache.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = c.Serve(ctx, l); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return sock
}

// pluginConf is the chain entry as the agent appends it (the chart's keys,
// paths in the test's dirs), with the primary plugin's result: eth0 and
// its addresses in the pod netns.
func pluginConf(t *testing.T, tp *testenv.Topo, bname, agentSocket string, trust bool) *libcni.PluginConfig {
	t.Helper()
	dir := filepath.Dir(agentSocket)
	c := map[string]any{
		"cniVersion":   "1.0.0",
		"name":         "contract",
		"type":         "mesh-cni",
		"capabilities": map[string]bool{node.PodAnnotationsCapability: true},
		"logLevel":     "warn",
		"backend":      bname,
		"agentSocket":  agentSocket,
		"kubeconfig":   filepath.Join(dir, "no-kubeconfig"),
		"readyMarker":  filepath.Join(dir, "ready"),
		"reportSocket": filepath.Join(dir, "report.sock"),
		"prevResult": map[string]any{
			"cniVersion": "1.0.0",
			"interfaces": []any{map[string]any{"name": "eth0", "sandbox": tp.Pod.Path()}},
			"ips": []any{
				map[string]any{"address": testenv.PodV4 + "/24", "gateway": testenv.PeerV4, "interface": 0},
				map[string]any{"address": testenv.PodV6 + "/64", "gateway": testenv.PeerV6, "interface": 0},
			},
			"routes": []any{
				map[string]any{"dst": "0.0.0.0/0", "gw": testenv.PeerV4},
				map[string]any{"dst": "::/0", "gw": testenv.PeerV6},
			},
		},
	}
	meshes := map[string]map[string]any{mesh.Kuma: {"enabled": true}, mesh.Consul: {"enabled": true}}
	if trust {
		for _, name := range []string{mesh.Linkerd, mesh.Istio, mesh.Kuma} {
			if meshes[name] == nil {
				meshes[name] = map[string]any{}
			}
			meshes[name]["trustAnnotations"] = true
		}
	}
	c["meshes"] = meshes
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	conf, err := libcni.NetworkPluginConfFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	return conf
}

// noRules fails when the pod netns holds any of our rules, with any tool.
func noRules(t *testing.T, tp *testenv.Topo) {
	t.Helper()
	for _, tool := range []string{"nft list ruleset", "iptables-nft-save", "ip6tables-nft-save"} {
		out, err := exec.Command("nsenter", append([]string{"--net=" + tp.Pod.Path()}, strings.Fields(tool)...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", tool, err, out)
		}
		if strings.Contains(string(out), "mesh_cni") || strings.Contains(string(out), ":MESH_") {
			t.Errorf("%s shows our rules:\n%s", tool, out)
		}
	}
}

// probes are the connections one fixture's checks make.
type probes struct {
	w  *promise
	tp *testenv.Topo
	// out: destinations for app processes, by address family.
	out []dest
	// in: pod ports the peer connects to; ifaces: per excluded interface,
	// the pod's and the peer's address on it, by family.
	in     []int
	ifaces []ifaceAddrs
}

type dest struct {
	addr netip.Addr
	port int
}

type ifaceAddrs struct {
	name      string
	pod, peer map[bool]string // by "is IPv6"
}

// newProbes chooses the destinations and ports the promise speaks of,
// wires what they need (addresses on the peer, extra interfaces) and starts
// the servers: the peer, the pod's app and the proxy with its kubelet
// identity.
func newProbes(t *testing.T, tp *testenv.Topo, w *promise) *probes {
	t.Helper()
	p := &probes{w: w, tp: tp}
	peerPorts := []int{appPort}
	for _, peer := range []string{testenv.PeerV4, testenv.PeerV6} {
		a := netip.MustParseAddr(peer)
		p.out = append(p.out, dest{a, appPort})
		for _, port := range append(slices.Clone(w.excludePorts), w.includePorts...) {
			p.out = append(p.out, dest{a, port})
			if !slices.Contains(peerPorts, port) {
				peerPorts = append(peerPorts, port)
			}
		}
	}
	for _, r := range slices.Concat(w.excludeRanges, w.includeIn, w.alsoProbe) {
		a := host(r)
		if a == netip.MustParseAddr(testenv.PodV4) || a == netip.MustParseAddr(testenv.PodV6) {
			continue // the pod's own address: the proxy-to-self probe's
		}
		tp.PeerAddress(t, a)
		p.out = append(p.out, dest{a, appPort})
	}
	for i, name := range w.ifaces {
		ia := ifaceAddrs{
			name: name,
			pod:  map[bool]string{false: fmt.Sprintf("198.18.%d.1", 11+i), true: fmt.Sprintf("fd00:%x::1", 0x11+i)},
			peer: map[bool]string{false: fmt.Sprintf("198.18.%d.2", 11+i), true: fmt.Sprintf("fd00:%x::2", 0x11+i)},
		}
		tp.Link(t, name, []string{ia.pod[false] + "/24", ia.pod[true] + "/64"}, []string{ia.peer[false] + "/24", ia.peer[true] + "/64"})
		p.ifaces = append(p.ifaces, ia)
	}
	p.in = []int{appPort}
	for _, port := range append(slices.Clone(w.inExclude), w.inPorts...) {
		if !slices.Contains(p.in, port) {
			p.in = append(p.in, port)
		}
	}
	if !w.inAll && !slices.Contains(p.in, 9090) {
		p.in = append(p.in, 9090) // a port the include list leaves out
	}
	proxyPorts := []int{w.outboundPort, w.inboundPort, w.dnsPort}
	p.in = slices.DeleteFunc(p.in, func(port int) bool { return slices.Contains(proxyPorts, port) })
	if w.refused != "" {
		return p // ADD fails: nothing to serve
	}
	tp.Serve(t, tp.Peer, nil, "-name", "peer", "-ports", join(peerPorts), "-dns", "53")
	tp.Serve(t, tp.Pod, nil, "-name", "app", "-ports", join(p.in))
	args := []string{"-name", "proxy", "-outbound", fmt.Sprint(w.outboundPort), "-inbound", fmt.Sprint(w.inboundPort)}
	if w.tproxy {
		args = append(args, "-tproxy")
	}
	if w.dnsPort != 0 {
		args = append(args, "-dns", fmt.Sprint(w.dnsPort))
	}
	tp.Serve(t, tp.Pod, cred(w.proxy.id), args...)
	return p
}

func join(ports []int) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = fmt.Sprint(p)
	}
	return strings.Join(s, ",")
}

func cred(id Process) *syscall.Credential {
	return testenv.Cred(id.UID, id.GID, id.Groups...)
}

// run checks one family: the pod's address and the peer's.
func (p *probes) run(t *testing.T, podAddr, peerAddr string) {
	w := p.w
	v6 := strings.Contains(podAddr, ":")
	var dests []dest
	for _, d := range p.out {
		if d.addr.Is6() == v6 {
			dests = append(dests, d)
		}
	}
	for _, ia := range p.ifaces {
		dests = append(dests, dest{netip.MustParseAddr(ia.peer[v6]), appPort})
	}
	redirected := func(d dest) bool {
		return w.redirectedOut(d.addr, d.port) && !slices.ContainsFunc(p.ifaces, func(ia ifaceAddrs) bool { return ia.peer[v6] == d.addr.String() })
	}
	// The main destination: the first one the promise redirects.
	main := -1
	for i, d := range dests {
		if redirected(d) {
			main = i
			break
		}
	}
	if main < 0 {
		t.Logf("the pod's include lists redirect no destination of the topology over %s: app checks are bypass checks only", map[bool]string{false: "IPv4", true: "IPv6"}[v6])
		main = 0
	}
	md := dests[main]
	// Every app container's identity, to the main destination.
	for _, a := range w.apps {
		p.expectOut(t, a, md, redirected(md) && !a.optOut)
	}
	// The proxy's identity never loops.
	p.expectOut(t, w.proxy, md, false)
	// Every other destination, as the first app.
	if i := slices.IndexFunc(w.apps, func(m member) bool { return !m.optOut }); i >= 0 {
		app := w.apps[i]
		for i, d := range dests {
			if i != main {
				p.expectOut(t, app, d, redirected(d))
			}
		}
		// DNS: to the proxy's DNS port only where the pod captures it.
		p.expectDNS(t, app, peerAddr, w.captureDNS)
		p.expectDNS(t, w.proxy, peerAddr, false)
		if w.dnsLocal.IsValid() && w.dnsLocal.Is6() == v6 {
			// Consul captures what goes to its local resolver address,
			// whoever sends it: the sdk's DNS rule comes before the
			// proxy's RETURN and has no owner match (consul/sdk v0.18.1
			// iptables/iptables.go:192-212), so the dataplane's own
			// queries reach its DNS proxy too.
			p.expectDNS(t, app, w.dnsLocal.String(), true)
			p.expectDNS(t, w.proxy, w.dnsLocal.String(), true)
		}
		if w.captureDNS && w.mesh == mesh.Kuma {
			// kuma-cni returns traffic to excluded destinations before
			// its DNS capture (kumahq/kuma v2.14.3 pkg/transparentproxy/
			// iptables/builder/builder_table_nat.go:228-306).
			for _, d := range dests {
				if slices.ContainsFunc(w.excludeRanges, func(r netip.Prefix) bool { return r.Contains(d.addr) }) {
					p.expectDNS(t, app, d.addr.String(), false)
				}
			}
		}
	}
	if w.mesh == mesh.Kuma {
		p.expectSelf(t, podAddr)
	}
	// Inbound, through eth0 and each excluded interface.
	for _, port := range p.in {
		p.expectIn(t, podAddr, port, w.redirectedIn(port))
	}
	for _, ia := range p.ifaces {
		p.expectIn(t, ia.pod[v6], appPort, false)
	}
}

func (p *probes) expectOut(t *testing.T, m member, d dest, toProxy bool) {
	t.Helper()
	r, err := p.tp.Connect(p.tp.Pod, cred(m.id), false, d.addr.String(), d.port)
	if err != nil {
		t.Errorf("%s to %s: %v", m, dp(d), err)
		return
	}
	orig := dp(d)
	switch {
	case toProxy && (r.Name != "proxy" || r.Port != p.w.outboundPort || r.Orig != orig):
		t.Errorf("%s to %s bypassed the proxy: answered by %+v", m, orig, r)
	case !toProxy && (r.Name != "peer" || r.Port != d.port):
		t.Errorf("%s to %s should reach it directly: answered by %+v", m, orig, r)
	}
}

func (p *probes) expectDNS(t *testing.T, m member, peer string, toProxy bool) {
	t.Helper()
	r, err := p.tp.Connect(p.tp.Pod, cred(m.id), true, peer, 53)
	if err != nil {
		t.Errorf("%s DNS to %s: %v", m, peer, err)
		return
	}
	switch {
	case toProxy && (r.Name != "proxy" || r.Port != p.w.dnsPort):
		t.Errorf("%s DNS to %s bypassed the proxy's DNS port: answered by %+v", m, peer, r)
	case !toProxy && (r.Name != "peer" || r.Port != 53):
		t.Errorf("%s DNS to %s should reach it directly: answered by %+v", m, peer, r)
	}
}

func (p *probes) expectIn(t *testing.T, podAddr string, port int, toProxy bool) {
	t.Helper()
	r, err := p.tp.Connect(p.tp.Peer, nil, false, podAddr, port)
	dst := net.JoinHostPort(podAddr, fmt.Sprint(port))
	if err != nil {
		t.Errorf("inbound to %s: %v", dst, err)
		return
	}
	switch {
	case toProxy && (r.Name != "proxy" || r.Port != p.w.inboundPort || r.Orig != dst):
		t.Errorf("inbound to %s did not reach the proxy's inbound port: answered by %+v", dst, r)
	case !toProxy && (r.Name != "app" || r.Port != port):
		t.Errorf("inbound to %s should reach the app directly: answered by %+v", dst, r)
	}
}

func dp(d dest) string { return net.JoinHostPort(d.addr.String(), fmt.Sprint(d.port)) }
