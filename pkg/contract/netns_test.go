package contract

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/mesh-cni/mesh-cni/pkg/backend"
	"github.com/mesh-cni/mesh-cni/pkg/mesh"
	"github.com/mesh-cni/mesh-cni/pkg/rules"
	"github.com/mesh-cni/mesh-cni/pkg/testenv"
)

// TestFixturesInNetns programs the rules the plugin derives from each
// fixture pod (Istio's injector output, Linkerd's documented shapes) into a
// real network namespace, with each backend, and runs processes with each
// container's identity exactly as the kubelet gives it (UID, primary GID,
// fsGroup and supplementalGroups as supplementary groups): every app
// container's connection lands at the proxy with its original destination,
// over IPv4 and IPv6; the proxy's own connection goes out directly; an
// inbound connection lands at the proxy's inbound port.
func TestFixturesInNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	files, err := filepath.Glob("testdata/*/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, f := range files {
		for _, path := range []string{"spec", "annotations"} {
			for _, bname := range []string{backend.NFTables, backend.IptablesNFT} {
				t.Run(strings.TrimSuffix(strings.TrimPrefix(f, "testdata/"), ".yaml")+"/"+path+"/"+bname, func(t *testing.T) {
					fixtureInNetns(t, f, path == "spec", bname)
				})
			}
		}
	}
}

// appPort is what the peer and the pod's apps serve.
const appPort = 8080

// fixtureInNetns runs one fixture through one backend. withSpec: the pod as
// the agent's cache or an API GET gives it; else the runtime's annotations
// alone, as ADD judges a pod whose mesh trusts them.
func fixtureInNetns(t *testing.T, file string, withSpec bool, bname string) {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var p mesh.APIPod
	var kp corev1.Pod
	if err := yaml.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &kp); err != nil {
		t.Fatal(err)
	}
	img, err := ImageIDs(&p)
	if err != nil {
		t.Fatal(err)
	}
	pod, cfg := p.Pod(), meshes()
	if !withSpec {
		// The user's opt-in (trustAnnotations), documented as safe only
		// where the proxy runs as the mesh's default UID.
		pod.SpecKnown, pod.Containers, pod.InitContainers, pod.Labels = false, nil, nil, nil
		for name, c := range cfg {
			c.TrustAnnotations = ptr(true)
			cfg[name] = c
		}
	}
	d, err := mesh.Decide(cfg, pod, []rules.Family{rules.IPv4, rules.IPv6})
	var ie *mesh.IdentityError
	if errors.As(err, &ie) {
		t.Skipf("refused, as it must be: %v", err)
	}
	if err == nil && !withSpec && d.NeedSpec {
		t.Skipf("annotations alone do not decide this pod (%s): the plugin looks the spec up", d.Reason)
	}
	if err != nil || !d.Meshed {
		t.Fatalf("not meshed: %+v %v", d, err)
	}
	spec := *d.Spec
	be, err := backend.New(bname)
	if err != nil {
		t.Skipf("backend %s: %v", bname, err)
	}

	tp := testenv.NewTopo(t)
	proxyName := cfg[d.Mesh].WithDefaults(d.Mesh).Sidecar
	var proxyCred *syscall.Credential
	var apps []corev1.Container
	for _, c := range append(append([]corev1.Container{}, kp.Spec.InitContainers...), kp.Spec.Containers...) {
		switch {
		case c.Name == proxyName:
			proxyCred = kubeletCred(&p, &kp, c.Name, img)
		case mesh.MeshOwned(c.Name) || initOptOut(&p, c.Name):
		default:
			apps = append(apps, c)
		}
	}
	if proxyCred == nil {
		t.Fatalf("no %s container", proxyName)
	}
	if !withSpec && proxyCred.Uid != spec.ProxyUID {
		t.Skipf("the proxy runs as uid %d, not the mesh's default %d: trusting annotations is documented as unsafe here", proxyCred.Uid, spec.ProxyUID)
	}
	out, in := outboundDest(spec), inboundPort(spec)
	peerPorts := fmt.Sprint(appPort)
	if out.port != appPort {
		peerPorts += fmt.Sprint(",", out.port)
	}
	tp.Serve(t, tp.Peer, nil, "-name", "peer", "-ports", peerPorts)
	tp.Serve(t, tp.Pod, nil, "-name", "app", "-ports", fmt.Sprint(in))
	proxyArgs := []string{"-name", "proxy", "-outbound", fmt.Sprint(spec.OutboundPort), "-inbound", fmt.Sprint(spec.InboundPort)}
	if spec.Mode == rules.TProxy {
		proxyArgs = append(proxyArgs, "-tproxy")
	}
	if spec.CaptureDNS {
		proxyArgs = append(proxyArgs, "-dns", fmt.Sprint(spec.DNSPort))
	}
	tp.Serve(t, tp.Pod, proxyCred, proxyArgs...)

	if err := be.Apply(tp.Pod.Path(), rules.Generate(spec)); err != nil {
		t.Fatalf("apply with %s: %v", bname, err)
	}
	for _, peer := range []string{testenv.PeerV4, testenv.PeerV6} {
		for _, c := range apps {
			cred := kubeletCred(&p, &kp, c.Name, img)
			if !out.redirected {
				continue
			}
			r, err := tp.Connect(tp.Pod, cred, false, peer, out.port)
			if err != nil {
				t.Fatalf("app %s (%s) to %s: %v", c.Name, showCred(cred), peer, err)
			}
			if r.Name != "proxy" || r.Port != int(spec.OutboundPort) || r.Orig != net.JoinHostPort(peer, fmt.Sprint(out.port)) {
				t.Errorf("app %s (%s) to %s:%d bypassed the proxy: answered by %+v", c.Name, showCred(cred), peer, out.port, r)
			}
		}
		r, err := tp.Connect(tp.Pod, proxyCred, false, peer, appPort)
		if err != nil {
			t.Fatalf("proxy (%s) to %s: %v", showCred(proxyCred), peer, err)
		}
		if r.Name != "peer" {
			t.Errorf("the proxy's own connection (%s) to %s looped: answered by %+v", showCred(proxyCred), peer, r)
		}
	}
	for _, pod := range []string{testenv.PodV4, testenv.PodV6} {
		r, err := tp.Connect(tp.Peer, nil, false, pod, in)
		if err != nil {
			t.Fatalf("inbound to %s:%d: %v", pod, in, err)
		}
		if r.Name != "proxy" || r.Port != int(spec.InboundPort) {
			t.Errorf("inbound to %s:%d did not reach the proxy's inbound port: %+v", pod, in, r)
		}
	}
	if len(apps) > 0 && !out.redirected {
		t.Logf("outbound app checks skipped: the pod's include lists leave no destination of the topology redirected")
	}
}

// kubeletCred is a container's identity as the kubelet starts it: UID and
// primary GID from the container's securityContext, else the pod's, else
// the image's (Effective); supplementary groups fsGroup and
// supplementalGroups of the pod (the image's own /etc/group entries would
// come on top under the default Merge policy; the fixtures' images have
// none).
func kubeletCred(p *mesh.APIPod, kp *corev1.Pod, name string, img map[string]Identity) *syscall.Credential {
	var ac mesh.APIContainer
	for _, c := range append(append([]mesh.APIContainer{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		if c.Name == name {
			ac = c
		}
	}
	id := Effective(p, ac, img[name])
	var groups []uint32
	if sc := kp.Spec.SecurityContext; sc != nil {
		if sc.FSGroup != nil {
			groups = append(groups, uint32(*sc.FSGroup))
		}
		for _, g := range sc.SupplementalGroups {
			if !slices.Contains(groups, uint32(g)) {
				groups = append(groups, uint32(g))
			}
		}
	}
	return testenv.Cred(uint32(id.UID), uint32(id.GID), groups...)
}

func showCred(c *syscall.Credential) string {
	return fmt.Sprintf("uid %d gid %d groups %v", c.Uid, c.Gid, c.Groups)
}

type dest struct {
	port       int
	redirected bool
}

// outboundDest picks a port to the peer the pod's rules redirect: one of
// its include list, else appPort; not redirected at all when an include
// list of subnets leaves the topology's peer out.
func outboundDest(s rules.Spec) dest {
	port := appPort
	if len(s.IncludeOutbound) > 0 {
		port = int(s.IncludeOutbound[0].First)
	}
	for _, r := range s.IgnoreOutbound {
		if port >= int(r.First) && port <= int(r.Last) {
			port = int(r.Last) + 1
		}
	}
	peers := []netip.Addr{netip.MustParseAddr(testenv.PeerV4), netip.MustParseAddr(testenv.PeerV6)}
	for _, a := range peers {
		if len(s.IncludeSubnets) > 0 && !slices.ContainsFunc(s.IncludeSubnets, func(p netip.Prefix) bool { return p.Contains(a) }) && len(s.IncludeOutbound) == 0 {
			return dest{port: port}
		}
		if slices.ContainsFunc(append(slices.Clone(s.SkipSubnets), s.SkipOutboundSubnets...), func(p netip.Prefix) bool { return p.Contains(a) }) {
			return dest{port: port}
		}
	}
	return dest{port: port, redirected: true}
}

// inboundPort picks a pod port the rules send to the proxy.
func inboundPort(s rules.Spec) int {
	port := appPort
	if len(s.InboundPorts) > 0 {
		port = int(s.InboundPorts[0].First)
	}
	for _, r := range s.IgnoreInbound {
		if port >= int(r.First) && port <= int(r.Last) {
			port = int(r.Last) + 1
		}
	}
	return port
}
