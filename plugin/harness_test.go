package main

// The integration harness: the real plugin binary, Debian's reference
// plugins, real network namespaces, invoked through libcni as containerd and
// CRI-O do.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"github.com/mesh-cni/mesh-cni/internal/lookup/podget"
	"github.com/mesh-cni/mesh-cni/internal/mesh"
	"github.com/mesh-cni/mesh-cni/internal/node"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// Debian's containernetworking-plugins (1.1.1) speak CNI up to 1.0.0. For
// spec 1.1.0 (STATUS, GC) the same reference plugins are built from their
// upstream release: CNI_PLUGINS_VERSION in hack/versions.env, the release
// the kind node image is built with.
const (
	refPluginDir     = "/usr/lib/cni"
	upstreamPlugins  = "github.com/containernetworking/plugins"
	refPluginsPrefix = upstreamPlugins + "/plugins/"

	// The plugin under test is stamped as make build stamps it.
	stampVersion = "v9.9.9-test"
	stampCommit  = "0123456789abcdef0123456789abcdef01234567"
	stampFlags   = "-X github.com/mesh-cni/mesh-cni/internal/version.Version=" + stampVersion +
		" -X github.com/mesh-cni/mesh-cni/internal/version.Commit=" + stampCommit
)

var (
	pluginDir       string // holds the freshly built mesh-cni and mesh-cni-podget
	upstreamRelease string // CNI_PLUGINS_VERSION, read by pinnedVersion
	upstreamDir     string // ptp, bridge, host-local built from upstreamRelease
	specVers        = []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"}
)

// refPlugins is where the chain finds ptp, bridge and host-local.
func refPlugins(version string) string {
	if version == "1.1.0" {
		return upstreamDir
	}
	return refPluginDir
}

// pinnedVersion returns name's value as hack/pin.sh gives it: the
// environment variable when set, else the line in hack/versions.env.
func pinnedVersion(name string) (string, error) {
	out, err := exec.Command("bash", "../hack/pin.sh", name).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("hack/pin.sh %s: %w: %s", name, err, ee.Stderr)
		}
		return "", fmt.Errorf("hack/pin.sh %s: %w", name, err)
	}
	v := strings.TrimSpace(string(out))
	if v == "" {
		return "", fmt.Errorf("hack/pin.sh %s printed nothing", name)
	}
	return v, nil
}

// buildUpstreamPlugins installs the reference plugins once into the
// persistent cache (go install uses their own go.mod, not ours).
func buildUpstreamPlugins() (string, error) {
	cache := os.Getenv("MESH_CNI_CACHE")
	if cache == "" {
		cache = "/var/cache/mesh-cni"
	}
	dir := filepath.Join(cache, "cni-plugins-"+upstreamRelease)
	if _, err := os.Stat(filepath.Join(dir, "host-local")); err == nil {
		return dir, nil
	}
	args := []string{"install"}
	for _, p := range []string{"main/ptp", "main/bridge", "ipam/host-local"} {
		args = append(args, refPluginsPrefix+p+"@"+upstreamRelease)
	}
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return dir, nil
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(restrictEnv); spec != "" {
		os.Exit(launchRestricted(spec))
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "plugin tests need root: they create network namespaces and program netfilter")
		os.Exit(1)
	}
	if _, err := os.Stat(filepath.Join(refPluginDir, "ptp")); err != nil {
		fmt.Fprintln(os.Stderr, "Debian's containernetworking-plugins are missing (make deps installs them):", err)
		os.Exit(1)
	}
	var err error
	if upstreamRelease, err = pinnedVersion("CNI_PLUGINS_VERSION"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Rebuilt on every run, into a dir of its own: concurrent runs from
	// other checkouts must not swap the binary under this one.
	dir, err := os.MkdirTemp("", "mesh-cni-plugin-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The plugin and, beside it as the agent installs them, the helper
	// that does its API fallback GET.
	for name, pkg := range map[string]string{"mesh-cni": ".", podget.Binary: "../cmd/mesh-cni-podget"} {
		build := exec.Command("go", "build", "-trimpath", "-ldflags", stampFlags, "-o", filepath.Join(dir, name), pkg)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", name, err, out)
			os.Exit(1)
		}
	}
	pluginDir = dir
	// lookupPod called in-process (lookup_test.go) runs the same helper.
	podgetPath = func() (string, error) { return filepath.Join(dir, podget.Binary), nil }
	if upstreamDir, err = buildUpstreamPlugins(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The real kube-apiserver of the kubeconfig lookup test is started on
	// first use and stopped after the run.
	testenv.Main(m, testenv.AtExit(func() { os.RemoveAll(dir) }))
}

// nodeEnv is the node-side world the plugin talks to: the agent's socket,
// kubeconfig, readiness marker and report socket, all in a temp dir.
type nodeEnv struct {
	dir, agentSocket, kubeconfig, marker, reportSocket string

	mu     sync.Mutex
	pods   map[string]mesh.Pod // the agent's pod cache
	events []node.Event
	passed [][]int // per event, the fds it carried
	// holdFDs keeps passed fds open until the test ends (the agent closes
	// them at once): a test can then look at the netns they reference.
	holdFDs bool
}

func newNodeEnv(t *testing.T) *nodeEnv {
	t.Helper()
	dir := t.TempDir()
	e := &nodeEnv{
		dir:          dir,
		agentSocket:  filepath.Join(dir, "agent.sock"),
		kubeconfig:   filepath.Join(dir, "kubeconfig"),
		marker:       filepath.Join(dir, "ready"),
		reportSocket: filepath.Join(dir, "report.sock"),
		pods:         map[string]mesh.Pod{},
	}
	// The report socket: the agent reads one node.Event per datagram.
	addr := &net.UnixAddr{Name: e.reportSocket, Net: "unixgram"}
	rc, err := net.ListenUnixgram("unixgram", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	go func() {
		buf, oob := make([]byte, 64<<10), make([]byte, unix.CmsgSpace(16*4))
		for {
			n, oobn, _, _, err := rc.ReadMsgUnix(buf, oob)
			if err != nil {
				return
			}
			fds := passedFDs(t, oob[:oobn])
			var ev node.Event
			e.mu.Lock()
			if json.Unmarshal(buf[:n], &ev) == nil {
				e.events = append(e.events, ev)
				e.passed = append(e.passed, fds)
			}
			if !e.holdFDs {
				e.closeFDs(fds)
			}
			e.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.holdFDs {
			for _, fds := range e.passed {
				e.closeFDs(fds)
			}
		}
	})
	return e
}

// passedFDs are the fds a report carried (SCM_RIGHTS), kept open as the
// agent would until it closes them, so tests can look at what was passed
// and at the netns while it is still referenced.
func passedFDs(t *testing.T, oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		t.Errorf("report control data: %v", err)
		return nil
	}
	var fds []int
	for _, m := range msgs {
		r, err := unix.ParseUnixRights(&m)
		if err != nil {
			t.Errorf("report control data: %v", err)
		}
		fds = append(fds, r...)
	}
	return fds
}

func (e *nodeEnv) closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

func (e *nodeEnv) holdPassedFDs() {
	e.mu.Lock()
	e.holdFDs = true
	e.mu.Unlock()
}

// reportedFDs returns, per report so far, the fds it carried (closed
// already unless holdFDs).
func (e *nodeEnv) reportedFDs() [][]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.passed)
}

// startAgent serves the agent's pod cache on the unix socket, speaking the
// real protocol (GET /v1/pods/{ns}/{name} → mesh.Pod JSON).
func (e *nodeEnv) startAgent(t *testing.T) {
	t.Helper()
	l, err := net.Listen("unix", e.agentSocket)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go e.serveAgentConn(c)
		}
	}()
	t.Cleanup(func() { l.Close(); os.Remove(e.agentSocket) })
}

// setPod puts p in the agent's cache; without a UID it gets the one
// newPod passes for its name (testUID).
func (e *nodeEnv) setPod(p mesh.Pod) {
	if p.UID == "" {
		p.UID = testUID(p.Namespace, p.Name)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pods[p.Namespace+"/"+p.Name] = p
}

// serveAgentConn answers one HTTP/1.1 request. It is written out by hand
// so the test server is as plain as the client it tests.
func (e *nodeEnv) serveAgentConn(c net.Conn) {
	defer c.Close()
	buf := make([]byte, 4096)
	n, _ := c.Read(buf)
	line, _, _ := strings.Cut(string(buf[:n]), "\r\n")
	parts := strings.Fields(line) // GET /v1/pods/ns/name HTTP/1.1
	key := ""
	if len(parts) == 3 && strings.HasPrefix(parts[1], "/v1/pods/") {
		key, _, _ = strings.Cut(strings.TrimPrefix(parts[1], "/v1/pods/"), "?")
	}
	e.mu.Lock()
	p, ok := e.pods[key]
	e.mu.Unlock()
	if !ok {
		fmt.Fprintf(c, "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nConnection: close\r\n\r\nnot found")
		return
	}
	b, _ := json.Marshal(p)
	fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(b), b)
}

func (e *nodeEnv) reported() []node.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]node.Event(nil), e.events...)
}

// chainOpts describe one conflist.
type chainOpts struct {
	version  string
	primary  string // "ptp" or "bridge"
	families string // "v4", "v6", "dual"
	subnet   int    // picks distinct ranges per chain so chains never collide
	mesh     map[string]any
	noMesh   bool   // the primary alone (benchmark baseline)
	binDir   string // where mesh-cni is; "" = pluginDir
}

type chain struct {
	t      *testing.T
	cni    *libcni.CNIConfig
	list   *libcni.NetworkConfigList
	env    *nodeEnv
	opts   chainOpts
	bridge string
}

// ranges returns host-local ranges inside 198.18.0.0/15 and fd00::/8.
func ranges(fam string, subnet int) []any {
	v4 := []any{map[string]any{"subnet": fmt.Sprintf("198.%d.%d.0/24", 18+subnet/256, subnet%256)}}
	v6 := []any{map[string]any{"subnet": fmt.Sprintf("fd00:18:%x::/64", subnet)}}
	switch fam {
	case "v6":
		return []any{v6}
	case "dual":
		return []any{v4, v6}
	}
	return []any{v4}
}

func newChain(t *testing.T, env *nodeEnv, o chainOpts) *chain {
	t.Helper()
	if o.primary == "" {
		o.primary = "ptp"
	}
	if o.families == "" {
		o.families = "v4"
	}
	c := &chain{t: t, env: env, opts: o}
	ipam := map[string]any{"type": "host-local", "ranges": ranges(o.families, o.subnet), "dataDir": filepath.Join(t.TempDir(), "ipam")}
	primary := map[string]any{"type": o.primary, "ipMasq": false, "ipam": ipam}
	if o.primary == "bridge" {
		c.bridge = fmt.Sprintf("mcni%d", o.subnet)
		primary["bridge"] = c.bridge
		primary["isGateway"] = true
		t.Cleanup(func() { _ = exec.Command("ip", "link", "del", c.bridge).Run() })
	}
	plugins := []any{primary}
	if !o.noMesh {
		m := map[string]any{
			"type":         "mesh-cni",
			"capabilities": map[string]bool{node.PodAnnotationsCapability: true},
			"logLevel":     "warn",
			"agentSocket":  env.agentSocket,
			"kubeconfig":   env.kubeconfig,
			"readyMarker":  env.marker,
			"reportSocket": env.reportSocket,
			// The chain tests run Istio pods from their annotations alone
			// (no agent, no API server); which pods are looked up is
			// the lookup tests' subject.
			"meshes": map[string]any{"istio": map[string]any{"trustAnnotations": true}},
		}
		for k, v := range o.mesh {
			m[k] = v
		}
		plugins = append(plugins, m)
	}
	b, err := json.Marshal(map[string]any{"cniVersion": o.version, "name": fmt.Sprintf("meshtest%d", o.subnet), "plugins": plugins})
	if err != nil {
		t.Fatal(err)
	}
	c.list, err = libcni.NetworkConfFromBytes(b)
	if err != nil {
		t.Fatalf("conflist: %v\n%s", err, b)
	}
	bin := pluginDir
	if o.binDir != "" {
		bin = o.binDir
	}
	c.cni = libcni.NewCNIConfigWithCacheDir([]string{bin, refPlugins(o.version)}, t.TempDir(), nil)
	return c
}

// pod is one sandbox: a real netns plus what the runtime passes.
type pod struct {
	netns ns.NetNS
	rt    *libcni.RuntimeConf
}

func randID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newPod makes a netns and the runtime arguments containerd would pass.
// annotations nil means the runtime passes no annotations at all.
func newPod(t testing.TB, namespace, name string, annotations map[string]string) *pod {
	t.Helper()
	n := testenv.NewNS(t)
	// containerd and CRI-O bring loopback up themselves, outside the chain.
	if out, err := exec.Command("ip", "-n", filepath.Base(n.Path()), "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("lo up: %v %s", err, out)
	}
	id := randID()
	rt := &libcni.RuntimeConf{
		ContainerID: id,
		NetNS:       n.Path(),
		IfName:      "eth0",
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", namespace},
			{"K8S_POD_NAME", name},
			{"K8S_POD_INFRA_CONTAINER_ID", id},
			{"K8S_POD_UID", testUID(namespace, name)},
		},
	}
	if annotations != nil {
		rt.CapabilityArgs = map[string]any{node.PodAnnotationsCapability: annotations}
	}
	return &pod{netns: n, rt: rt}
}

// testUID is the UID the runtime passes for a pod (K8S_POD_UID) and the
// agent's cache holds for it, unless a test sets another.
func testUID(namespace, name string) string { return "uid-" + namespace + "-" + name }

// setUID makes the runtime pass uid for p.
func (p *pod) setUID(uid string) {
	for i, a := range p.rt.Args {
		if a[0] == "K8S_POD_UID" {
			p.rt.Args[i][1] = uid
		}
	}
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), testenv.Timeout())
	t.Cleanup(cancel)
	return c
}

func (c *chain) add(p *pod) (types.Result, error) {
	return c.cni.AddNetworkList(ctx(c.t), c.list, p.rt)
}
func (c *chain) check(p *pod) error { return c.cni.CheckNetworkList(ctx(c.t), c.list, p.rt) }
func (c *chain) del(p *pod) error   { return c.cni.DelNetworkList(ctx(c.t), c.list, p.rt) }

// mustAdd adds p and registers its DEL as cleanup.
func (c *chain) mustAdd(p *pod) types.Result {
	c.t.Helper()
	res, err := c.add(p)
	if err != nil {
		c.t.Fatalf("ADD %s: %v", podName(p), err)
	}
	c.t.Cleanup(func() { _ = c.del(p) })
	return res
}

func podName(p *pod) string {
	var ns, name string
	for _, a := range p.rt.Args {
		switch a[0] {
		case "K8S_POD_NAMESPACE":
			ns = a[1]
		case "K8S_POD_NAME":
			name = a[1]
		}
	}
	return ns + "/" + name
}

// ruleDump lists every netfilter rule in the netns, with each tool.
func ruleDump(t testing.TB, netnsPath string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, tool := range []string{"nft list ruleset", "iptables-legacy-save", "ip6tables-legacy-save", "iptables-nft-save", "ip6tables-nft-save"} {
		args := append([]string{"--net=" + netnsPath}, strings.Fields(tool)...)
		b, err := exec.Command("nsenter", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s in %s: %v\n%s", tool, netnsPath, err, b)
		}
		out[tool] = string(b)
	}
	return out
}

// ours says which tools show mesh-cni rules (chains are named MESH_*,
// the nft table mesh_cni).
func ours(dump map[string]string) []string {
	var with []string
	for _, tool := range []string{"nft list ruleset", "iptables-legacy-save", "ip6tables-legacy-save", "iptables-nft-save", "ip6tables-nft-save"} {
		s := dump[tool]
		if tool == "nft list ruleset" {
			if strings.Contains(s, "table inet mesh_cni") {
				with = append(with, tool)
			}
			continue
		}
		if strings.Contains(s, ":MESH_") {
			with = append(with, tool)
		}
	}
	return with
}

// istioAnnotations are what Istio's injector writes on a sidecar pod.
func istioAnnotations(extra map[string]string) map[string]string {
	a := map[string]string{
		"sidecar.istio.io/status": `{"initContainers":null,"containers":["istio-proxy"],"volumes":["istio-envoy"],"imagePullSecrets":null,"revision":"default"}`,
	}
	for k, v := range extra {
		a[k] = v
	}
	return a
}
