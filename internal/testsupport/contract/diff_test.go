package contract

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/libcni"
	corev1 "k8s.io/api/core/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// The differential tests' shared machinery: each pod is set up twice in
// fresh network namespaces, once by the mesh's own rules, once by
// mesh-cni, and every probe's landing is compared.

// A diffRun collects one differential test's comparisons and report. Its
// pods are compared in parallel subtests, so it takes a lock.
type diffRun struct {
	them string // the other side's name in the report
	// deliberate lists where mesh-cni differs on purpose, by pod and
	// probe ("ADD" for the setup itself; a probe key's suffix, such as
	// "tcp 198.18.10.2:6379", matches every identity), with the reason.
	deliberate map[[2]string]string

	mu          sync.Mutex
	report      map[string][]string // by pod
	total, same int
	kinds       map[string]int // the other side's landings, by where
}

func newDiffRun(them string, deliberate map[[2]string]string) *diffRun {
	return &diffRun{them: them, deliberate: deliberate, report: map[string][]string{}, kinds: map[string]int{}}
}

func (r *diffRun) reason(name, probe string) (string, bool) {
	if why, ok := r.deliberate[[2]string{name, probe}]; ok {
		return why, true
	}
	for k, why := range r.deliberate {
		if k[0] == name && k[1] != "ADD" && strings.HasSuffix(probe, " "+k[1]) {
			return why, true
		}
	}
	return "", false
}

// differ records a difference of pod name: listed ones go in the report
// with their reason, any other fails t too.
func (r *diffRun) differ(t *testing.T, name, probe, line string) {
	t.Helper()
	if why, ok := r.reason(name, probe); ok {
		r.note(name, line+" (deliberate: "+why+")")
		return
	}
	r.note(name, line)
	t.Errorf("%s", line)
}

// note puts a line in pod name's report without comparing anything.
func (r *diffRun) note(name, line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.report[name] = append(r.report[name], line)
}

// count adds one comparison; kind is where the other side landed ("" for
// an ADD).
func (r *diffRun) count(same bool, kind string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total++
	if same {
		r.same++
	}
	if kind != "" {
		r.kinds[kind]++
	}
}

// compare compares one pod's landings on both sides, mesh-cni's with
// backend bname; an ADD that fails on either side is one comparison.
func (r *diffRun) compare(t *testing.T, name, bname string, theirs map[string]string, terr error, ours map[string]string, oerr error) {
	t.Helper()
	if terr != nil || oerr != nil {
		r.count((terr == nil) == (oerr == nil), "")
		if (terr == nil) != (oerr == nil) {
			r.differ(t, name, "ADD", fmt.Sprintf("%s/%s: ADD: %s %v, mesh-cni %v", name, bname, r.them, errOr(terr), errOr(oerr)))
		} else {
			r.note(name, fmt.Sprintf("%s/%s: ADD fails on both sides: %s %v, mesh-cni %v", name, bname, r.them, errOr(terr), errOr(oerr)))
		}
		return
	}
	for _, k := range sortedKeys(theirs) {
		same := theirs[k] == ours[k]
		r.count(same, where(theirs[k]))
		if !same {
			r.differ(t, name, k, fmt.Sprintf("%s/%s: %s: %s %s, mesh-cni %s", name, bname, k, r.them, theirs[k], ours[k]))
		}
	}
}

// lines is the report in the pods' order, whatever order they ran in.
func (r *diffRun) lines(pods []diffPod) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, d := range pods {
		out = append(out, r.report[d.name]...)
	}
	return strings.Join(out, "\n")
}

// seen lists how many of the other side's landings were at each place in
// want, and fails t when one of them got none: then the comparison does
// not look at it.
func (r *diffRun) seen(t *testing.T, want []string, mayBeEmpty ...string) string {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, k := range want {
		out = append(out, fmt.Sprintf("%s %d", k, r.kinds[k]))
		if r.kinds[k] == 0 && !slices.Contains(mayBeEmpty, k) {
			t.Errorf("no probe landed at %s: the comparison does not see it", k)
		}
	}
	return strings.Join(out, ", ")
}

func diffRuntime(tp *testenv.Topo, kp *corev1.Pod) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: "d1ff" + strings.ReplaceAll(kp.Name, "-", ""),
		NetNS:       tp.Pod.Path(),
		IfName:      "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", kp.Namespace}, {"K8S_POD_NAME", kp.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", "d1ff"}, {"K8S_POD_UID", kp.Name + "-uid"}},
		CapabilityArgs: map[string]any{"io.kubernetes.cri.pod-annotations": kp.Annotations},
	}
}

// meshAdd runs mesh-cni's ADD with backend bname, the pod from the agent.
// The agent's cache holds the pod with the UID diffRuntime passes: the
// plugin compares them.
func meshAdd(t *testing.T, tp *testenv.Topo, kp *corev1.Pod, plugins, bname string) error {
	p := kp.DeepCopy()
	p.UID = k8stypes.UID(kp.Name + "-uid")
	conf := pluginConf(t, tp, bname, serveAgent(t, p), false)
	cni := libcni.NewCNIConfigWithCacheDir([]string{plugins}, t.TempDir(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Timeout())
	defer cancel()
	_, err := cni.AddNetwork(ctx, conf, diffRuntime(tp, kp))
	return err
}

func errOr(err error) string {
	if err == nil {
		return "succeeds"
	}
	return "fails: " + err.Error()
}

func diffPrevResult(tp *testenv.Topo) map[string]any {
	return map[string]any{
		"cniVersion": "1.0.0",
		"interfaces": []any{map[string]any{"name": "eth0", "sandbox": tp.Pod.Path()}},
		"ips": []any{
			map[string]any{"address": testenv.PodV4 + "/24", "gateway": testenv.PeerV4, "interface": 0},
			map[string]any{"address": testenv.PodV6 + "/64", "gateway": testenv.PeerV6, "interface": 0},
		},
	}
}

// Ports every pod's app serves besides appPort: Istio's own (tunnel,
// status, health, stats) and some no rule names.
var extraPodPorts = []int{15008, 15020, 15021, 15090, 5432, 9090}

// landings sets a fresh topology up with add and returns, per probe,
// where it landed ("proxy:15001", "app:8080", "peer:8080", "no answer").
// IPv6 is probed only for a dual-stack pod.
func landings(t *testing.T, w *promise, dual bool, add func(*testenv.Topo) error) (map[string]string, error) {
	t.Helper()
	tp := testenv.NewTopo(t)
	ps := newDiffProbes(t, tp, w, dual)
	tp.Serve(t, tp.Peer, nil, "-name", "peer", "-ports", join(ps.tcpPeer), "-dns", "53")
	tp.Serve(t, tp.Pod, nil, "-name", "app", "-ports", join(ps.pod))
	args := []string{"-name", "proxy", "-outbound", fmt.Sprint(w.outboundPort), "-inbound", fmt.Sprint(w.inboundPort), "-dns", fmt.Sprint(w.dnsPort)}
	if w.tproxy {
		args = append(args, "-tproxy")
	}
	tp.Serve(t, tp.Pod, cred(w.proxy.id), args...)
	if err := add(tp); err != nil {
		return nil, err
	}
	out := map[string]string{}
	ps.outbound(tp, w, out)
	ps.inbound(tp, w, dual, out)
	return out, nil
}

// diffProbes are the ports and addresses one run of landings connects to.
type diffProbes struct {
	pod, peer, udp, tcpPeer []int
	// remote are the peer's addresses inside the pod's excluded and
	// included ranges.
	remote []netip.Addr
	fams   []probeFamily
}

// probeFamily is the pod's, the peer's and the loopback address of one IP
// family.
type probeFamily struct{ pod, peer, lo string }

// newDiffProbes says what to probe for w, and puts the remote addresses on
// the peer.
func newDiffProbes(t *testing.T, tp *testenv.Topo, w *promise, dual bool) *diffProbes {
	t.Helper()
	ps := &diffProbes{}
	ps.pod = slices.Concat([]int{appPort, 53}, extraPodPorts, w.inExclude, w.inPorts, w.excludePorts)
	ps.pod = slices.DeleteFunc(uniq(ps.pod), func(p int) bool {
		return p == w.outboundPort || p == w.inboundPort || p == w.dnsPort
	})
	ps.peer = uniq(slices.Concat([]int{appPort, 5432}, w.excludePorts, w.includePorts))
	// The peer's DNS server answers TCP and UDP on 53; UDP to another
	// excluded port finds no listener there ("no answer"), and the
	// proxy's DNS port when something redirects it.
	ps.udp = uniq(slices.Concat([]int{53}, w.excludePorts))
	ps.tcpPeer = slices.DeleteFunc(slices.Clone(ps.peer), func(p int) bool { return p == 53 })
	for _, r := range slices.Concat(w.excludeRanges, w.includeIn, w.alsoProbe) {
		if a := host(r); a.Is4() || dual {
			tp.PeerAddress(t, a)
			ps.remote = append(ps.remote, a)
		}
	}
	ps.fams = []probeFamily{{testenv.PodV4, testenv.PeerV4, "127.0.0.1"}}
	if dual {
		ps.fams = append(ps.fams, probeFamily{testenv.PodV6, testenv.PeerV6, "::1"})
	}
	return ps
}

// land records where a probe landed.
func land(out map[string]string, key string, r testenv.Record, err error) {
	if err != nil {
		out[key] = "no answer"
		return
	}
	out[key] = fmt.Sprintf("%s:%d", r.Name, r.Port)
}

// outbound probes from the pod as the proxy, as root and as each app.
func (ps *diffProbes) outbound(tp *testenv.Topo, w *promise, out map[string]string) {
	ids := []member{w.proxy, {name: "root", id: Process{}}}
	ids = append(ids, w.apps...)
	for _, m := range ids {
		c := cred(m.id)
		if m.name == "root" {
			c = nil
		}
		dst := func(host string, ports []int) {
			for _, p := range ports {
				r, err := tp.Connect(tp.Pod, c, false, host, p)
				land(out, fmt.Sprintf("%s tcp %s", m.name, net.JoinHostPort(host, fmt.Sprint(p))), r, err)
			}
		}
		for _, f := range ps.fams {
			dst(f.peer, uniq(append(slices.Clone(ps.peer), 53)))
			dst(f.pod, ps.pod)
			dst(f.lo, ps.pod)
			for _, p := range ps.udp {
				r, err := tp.Connect(tp.Pod, c, true, f.peer, p)
				land(out, fmt.Sprintf("%s udp %s", m.name, net.JoinHostPort(f.peer, fmt.Sprint(p))), r, err)
			}
		}
		for _, a := range ps.remote {
			dst(a.String(), []int{appPort})
		}
	}
}

// inbound probes the pod's ports from the peer, and from the peer's
// addresses inside the sources Linkerd's skip-subnets names.
func (ps *diffProbes) inbound(tp *testenv.Topo, w *promise, dual bool, out map[string]string) {
	for _, f := range ps.fams {
		for _, p := range ps.pod {
			r, err := tp.Connect(tp.Peer, nil, false, f.pod, p)
			land(out, fmt.Sprintf("peer tcp %s", net.JoinHostPort(f.pod, fmt.Sprint(p))), r, err)
		}
	}
	for _, pr := range w.alsoProbe {
		a := host(pr)
		if !a.Is4() && !dual {
			continue
		}
		pod := testenv.PodV4
		if a.Is6() {
			pod = testenv.PodV6
		}
		for _, p := range ps.pod {
			r, err := tp.ConnectFrom(tp.Peer, a.String(), pod, p)
			land(out, fmt.Sprintf("peer from %s tcp %s", a, net.JoinHostPort(pod, fmt.Sprint(p))), r, err)
		}
	}
}

func uniq(in []int) []int {
	out := slices.Clone(in)
	slices.Sort(out)
	return slices.Compact(out)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// where is a landing without the port, except at the proxy.
func where(landing string) string {
	if strings.HasPrefix(landing, "proxy:") {
		return landing
	}
	name, _, _ := strings.Cut(landing, ":")
	return name + ":*"
}
