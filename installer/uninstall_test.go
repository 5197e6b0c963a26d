package main

import (
	"bytes"
	"context"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// TestAgentStopDecision runs the real agent binary with the chart's RBAC
// against a real API server and stops it the ways a cluster does:
// helm uninstall (DaemonSet deleted, then its ServiceAccount and bindings,
// before the pod gets SIGTERM), a plain restart, and stops while the API
// refuses (401, 403: an RBAC change during a rollout), fails (500) or is
// unreachable. Only a deletion the API server reported uninstalls.
func TestAgentStopDecision(t *testing.T) {
	env := testenv.Start(t)
	bin := buildAgent(t)
	failing := failingAPI(t)
	ctx := context.Background()
	bg := metav1.DeletePropagationBackground
	delDS := func(ns string, r *agentRig) {
		if err := env.Client.AppsV1().DaemonSets(ns).Delete(ctx, "mesh-cni", metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
			t.Fatal(err)
		}
		// helm deletes the RBAC right after; the agent's watch has it first.
		waitFor(t, func() bool { return strings.Contains(r.logs.String(), "the DaemonSet was deleted") })
	}
	delSA := func(ns string) {
		if err := env.Client.CoreV1().ServiceAccounts(ns).Delete(ctx, "mesh-cni", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	delBindings := func(ns string) {
		if err := env.Client.RbacV1().RoleBindings(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		crbs, err := env.Client.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range crbs.Items {
			if strings.HasPrefix(b.Name, ns+"-") {
				if err := env.Client.RbacV1().ClusterRoleBindings().Delete(ctx, b.Name, metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	// waitRefused waits until the agent's token gets refused what pass says.
	waitRefused := func(ns, token string, refused func(error) bool) {
		sa, err := kubernetes.NewForConfig(env.TokenConfig(token))
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool {
			_, err := sa.AppsV1().DaemonSets(ns).Get(ctx, "mesh-cni", metav1.GetOptions{})
			return refused(err)
		})
	}
	for _, c := range []struct {
		name      string
		before    func(ns string, api *tcpProxy, token string, r *agentRig) // between ready and SIGTERM
		uninstall bool
		why       string
	}{
		{"helm uninstall", func(ns string, _ *tcpProxy, token string, r *agentRig) {
			delDS(ns, r)
			delSA(ns)
			delBindings(ns)
			// The API server's ServiceAccount cache lags the delete a
			// moment (a 403 then); wait for the 401.
			waitRefused(ns, token, apierrors.IsUnauthorized)
		}, true, "was deleted"},
		{"RBAC gone after the DaemonSet", func(ns string, _ *tcpProxy, token string, r *agentRig) {
			delDS(ns, r)
			delBindings(ns)
			waitRefused(ns, token, apierrors.IsForbidden)
		}, true, "was deleted"},
		{"DaemonSet gone, RBAC intact", func(ns string, _ *tcpProxy, _ string, r *agentRig) { delDS(ns, r) }, true, "is gone"},
		{"restart", func(string, *tcpProxy, string, *agentRig) {}, false, "DaemonSet still exists"},
		{"403, DaemonSet intact", func(ns string, _ *tcpProxy, token string, _ *agentRig) {
			delBindings(ns)
			waitRefused(ns, token, apierrors.IsForbidden)
		}, false, "cannot look up the DaemonSet"},
		{"401, DaemonSet intact", func(ns string, _ *tcpProxy, token string, _ *agentRig) {
			delSA(ns)
			waitRefused(ns, token, apierrors.IsUnauthorized)
		}, false, "cannot look up the DaemonSet"},
		{"API answers 500", func(_ string, api *tcpProxy, _ string, _ *agentRig) { api.Redirect(failing) }, false, "cannot look up the DaemonSet"},
		{"API unreachable", func(_ string, api *tcpProxy, _ string, _ *agentRig) { api.Close() }, false, "cannot look up the DaemonSet"},
		{"API unreachable after the DaemonSet was deleted", func(ns string, api *tcpProxy, _ string, r *agentRig) {
			delDS(ns, r)
			delBindings(ns)
			api.Close()
		}, true, "was deleted"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns, _, token := agentClient(t, env)
			api := newTCPProxy(t, env.Host)
			r := startAgentRig(t, env, bin, ns, token, api.addr, failing.ca)
			waitFor(t, func() bool { return strings.Contains(r.logs.String(), "DaemonSet lookup allowed") })
			c.before(ns, api, token, r)
			r.cmd.Process.Signal(syscall.SIGTERM)
			if err := r.cmd.Wait(); err != nil {
				t.Fatalf("agent exit: %v\n%s", err, r.logs.String())
			}
			if !strings.Contains(r.logs.String(), c.why) {
				t.Errorf("stop reason: want %q in the log", c.why)
			}
			got, _ := os.ReadFile(r.primary)
			installed := []string{"host/opt/cni/bin/mesh-cni", "host/opt/cni/bin/mesh-cni-podget", "host/var/lib/mesh-cni/kubeconfig", "host/var/run/mesh-cni/ready"}
			if c.uninstall {
				if !bytes.Equal(got, r.orig) {
					t.Errorf("primary not restored byte for byte:\n%s", got)
				}
				for _, p := range installed {
					if _, err := os.Stat(r.d(p)); !os.IsNotExist(err) {
						t.Errorf("%s left after uninstall: %v", p, err)
					}
				}
				return
			}
			if !bytes.Contains(got, []byte(`"mesh-cni"`)) {
				t.Errorf("chain entry removed:\n%s", got)
			}
			for _, p := range installed {
				if _, err := os.Stat(r.d(p)); err != nil {
					t.Errorf("%s gone: %v", p, err)
				}
			}
		})
	}
}

// failingServer is an HTTPS server that answers every request with 500,
// and the CA (its own certificate) that makes the agent trust it.
type failingServer struct {
	addr string
	ca   []byte
}

func failingAPI(t *testing.T) failingServer {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "etcdserver: request timed out", http.StatusInternalServerError)
	}))
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	return failingServer{addr: srv.Listener.Addr().String(), ca: ca}
}

type agentRig struct {
	cmd     *exec.Cmd
	logs    *testenv.Buffer
	d       func(string) string
	primary string
	orig    []byte
}

// startAgentRig runs the agent binary on temp dirs (kindnet's conflist as
// the primary) against the API server at apiAddr, trusting extraCA too,
// and waits until ready.
func startAgentRig(t *testing.T, env *testenv.Env, bin, ns, token, apiAddr string, extraCA []byte) *agentRig {
	t.Helper()
	root := t.TempDir()
	r := &agentRig{logs: &testenv.Buffer{}, d: func(p string) string { return filepath.Join(root, p) }}
	for _, p := range []string{"host/opt/cni/bin", "host/etc/cni/net.d", "sa", "img"} {
		os.MkdirAll(r.d(p), 0o755)
	}
	var err error
	if r.orig, err = os.ReadFile("../internal/agent/install/testdata/conflists/kindnet-ipv4.conflist"); err != nil {
		t.Fatal(err)
	}
	r.primary = r.d("host/etc/cni/net.d/10-kindnet.conflist")
	os.WriteFile(r.primary, r.orig, 0o644)
	primaryPlugins(t, r.d("host/opt/cni/bin"), r.orig)
	os.WriteFile(r.d("sa/token"), []byte(token), 0o600)
	os.WriteFile(r.d("sa/ca.crt"), append(append([]byte{}, env.CAData...), extraCA...), 0o600)
	os.WriteFile(r.d("img/mesh-cni"), []byte("plugin"), 0o755)
	os.WriteFile(r.d("img/mesh-cni-podget"), []byte("podget"), 0o755)
	os.WriteFile(r.d("img/plugin.json"), []byte(`{"type":"mesh-cni","backend":"nftables"}`), 0o644)
	host, port, _ := net.SplitHostPort(apiAddr)
	nodeName := "node-" + ns
	env.Node(t, nodeName)
	probe := freeAddrT(t)
	r.cmd = exec.Command(bin, "--cni-bin-dir", r.d("host/opt/cni/bin"), "--cni-conf-dir", r.d("host/etc/cni/net.d"),
		"--state-dir", r.d("host/var/lib/mesh-cni"), "--run-dir", r.d("host/var/run/mesh-cni"),
		"--plugin-config", r.d("img/plugin.json"), "--plugin-binary", r.d("img/mesh-cni"), "--podget-binary", r.d("img/mesh-cni-podget"),
		"--token-path", r.d("sa/token"), "--probe-addr", probe, "--metrics-addr", freeAddrT(t), "--log-level=debug")
	r.cmd.Env = append(os.Environ(), "KUBERNETES_SERVICE_HOST="+host, "KUBERNETES_SERVICE_PORT="+port,
		"NODE_NAME="+nodeName, "POD_NAMESPACE="+ns)
	r.cmd.Stderr = r.logs
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.cmd.Process.Kill()
		r.cmd.Wait()
		if t.Failed() {
			t.Logf("agent log:\n%s", r.logs.String())
		}
	})
	waitFor(t, func() bool {
		resp, err := http.Get("http://" + probe + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	// By default the host gets the plugin's token, never the agent's.
	if kc, err := os.ReadFile(r.d("host/var/lib/mesh-cni/kubeconfig")); err != nil || bytes.Contains(kc, []byte(token)) {
		t.Fatalf("host kubeconfig carries the agent's own token (or is unreadable: %v)", err)
	}
	return r
}

// tcpProxy forwards to the API server until closed; closing it makes the
// API server unreachable for the agent (refused, existing streams cut).
type tcpProxy struct {
	addr   string
	l      net.Listener
	mu     sync.Mutex
	target string
	conns  []net.Conn
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	l, err := netListen()
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{addr: l.Addr().String(), l: l, target: u.Host}
	t.Cleanup(p.Close)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			target := p.target
			p.mu.Unlock()
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
	return p
}

func (p *tcpProxy) Close() {
	p.l.Close()
	p.cut()
}

// Redirect sends new connections to the failing server f and cuts the
// open ones, so the agent's next request meets f.
func (p *tcpProxy) Redirect(f failingServer) {
	p.mu.Lock()
	p.target = f.addr
	p.mu.Unlock()
	p.cut()
}

func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
