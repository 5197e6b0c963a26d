// Package testenv runs a real etcd and kube-apiserver (and, on request, a
// kube-controller-manager with chosen controllers) for tests, from binaries
// built by hack/build-k8s.sh. One instance is shared by every test of a test
// binary; it starts on first use and stops when the binary exits.
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
//	func TestX(t *testing.T) {
//		env := testenv.Start(t)
//		ns := env.Namespace(t, "x")
//		...
//	}
package testenv

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Env is a running control plane.
type Env struct {
	// Dir holds certificates, data and the servers' logs
	// (etcd.log, kube-apiserver.log, kube-controller-manager.log).
	Dir string
	// Host is the API server URL, https://127.0.0.1:PORT.
	Host string
	// CAData is the PEM CA bundle that verifies the API server.
	CAData []byte
	// Config authenticates as a member of system:masters (cluster admin).
	Config *rest.Config
	// Client is a clientset for Config.
	Client kubernetes.Interface
	// Kubeconfig is the path of an admin kubeconfig file (for kubectl).
	Kubeconfig string
	// Issuer is the service-account token issuer.
	Issuer string

	procs []*process
}

// Option changes what Main starts.
type Option func(*options)

type options struct {
	controllers []string
	atExit      []func()
}

// AtExit runs fn after the tests, before Main exits.
func AtExit(fn func()) Option {
	return func(o *options) { o.atExit = append(o.atExit, fn) }
}

// WithControllers also runs kube-controller-manager with only these
// controllers (names as in its --controllers flag), e.g. "disruption" for real
// PodDisruptionBudget status, "serviceaccount" for default service accounts.
func WithControllers(names ...string) Option {
	return func(o *options) { o.controllers = append(o.controllers, names...) }
}

var (
	shared struct {
		sync.Mutex
		main    bool
		opts    options
		started bool
		env     *Env
		err     error
	}
)

// Main runs the tests of m and then stops the shared control plane if a
// test started it, and removes the binaries GoBinary built. Call it from
// TestMain.
func Main(m *testing.M, opts ...Option) {
	shared.Lock()
	shared.main = true
	for _, o := range opts {
		o(&shared.opts)
	}
	shared.Unlock()
	code := m.Run()
	shared.Lock()
	if shared.env != nil {
		shared.env.Stop()
	}
	atExit := shared.opts.atExit
	shared.Unlock()
	for _, fn := range atExit {
		fn()
	}
	removeBinaries()
	os.Exit(code)
}

// Start returns the shared control plane, starting it on first use. The test
// fails when it cannot start (the error carries the server's log tail).
func Start(t testing.TB) *Env {
	t.Helper()
	shared.Lock()
	defer shared.Unlock()
	if !shared.main {
		t.Fatal("testenv: the shared control plane needs TestMain to call testenv.Main(m)")
	}
	if !shared.started {
		shared.started = true
		ctx, cancel := context.WithTimeout(context.Background(), Scale(2*time.Minute))
		shared.env, shared.err = newEnv(ctx, shared.opts)
		cancel()
	}
	if shared.err != nil {
		t.Fatalf("testenv: %v", shared.err)
	}
	return shared.env
}

// New starts a control plane of its own; the caller must Stop it. Most tests
// want Start instead; programs outside tests (benchmarks) use New. Building
// missing binaries is not bounded by ctx.
func New(ctx context.Context, opts ...Option) (*Env, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return newEnv(ctx, o)
}

func newEnv(ctx context.Context, o options) (*Env, error) {
	names := []string{"etcd", "kube-apiserver"}
	if len(o.controllers) > 0 {
		names = append(names, "kube-controller-manager")
	}
	bin, err := ensureBinaries(names...)
	if err != nil {
		return nil, err
	}
	var lastErr error
	// A free port may be taken between choosing it and binding it: retry.
	for range 3 {
		env, err := start(ctx, bin, o)
		if err == nil {
			return env, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func start(ctx context.Context, bin string, o options) (_ *Env, err error) {
	dir, err := os.MkdirTemp("", "mesh-cni-testenv-")
	if err != nil {
		return nil, err
	}
	env := &Env{Dir: dir, Issuer: "https://kubernetes.default.svc.cluster.local"}
	defer func() {
		if err != nil {
			env.Stop()
		}
	}()
	p, err := newPKI(dir)
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	etcdURL, err := env.startEtcd(ctx, bin, ports[0], ports[1])
	if err != nil {
		return nil, err
	}
	if err := env.startAPIServer(ctx, bin, p, etcdURL, ports[2]); err != nil {
		return nil, err
	}
	if env.Kubeconfig, err = writeKubeconfig(dir, env, p); err != nil {
		return nil, err
	}
	if len(o.controllers) > 0 {
		if err := env.startControllers(ctx, bin, o.controllers); err != nil {
			return nil, err
		}
	}
	return env, nil
}

// startEtcd runs etcd on the two ports and returns its client URL once it
// answers healthy.
func (e *Env) startEtcd(ctx context.Context, bin string, clientPort, peerPort int) (string, error) {
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	plain := &http.Client{Timeout: Scale(time.Second)}
	healthy := func(ctx context.Context, _ *process) bool { return httpOK(ctx, plain, etcdURL+"/health") }
	return etcdURL, e.run(ctx, bin, "etcd", "healthy", healthy,
		"--name=testenv",
		"--data-dir="+filepath.Join(e.Dir, "etcd"),
		"--listen-client-urls="+etcdURL,
		"--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=testenv="+peerURL,
		// Test data is thrown away: no fsync keeps etcd fast on a busy disk.
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	)
}

// startAPIServer runs kube-apiserver on port against etcd, sets Host,
// CAData, Config and Client, and returns once /readyz answers.
func (e *Env) startAPIServer(ctx context.Context, bin string, p *pki, etcdURL string, port int) error {
	e.Host = "https://127.0.0.1:" + strconv.Itoa(port)
	e.CAData = p.caPEM
	e.Config = &rest.Config{
		Host:            e.Host,
		TLSClientConfig: rest.TLSClientConfig{CAData: p.caPEM, CertData: p.adminCert, KeyData: p.adminKey},
		QPS:             100,
		Burst:           200,
		Timeout:         Scale(30 * time.Second),
	}
	var err error
	if e.Client, err = kubernetes.NewForConfig(e.Config); err != nil {
		return err
	}
	readyClient, err := rest.HTTPClientFor(e.Config)
	if err != nil {
		return err
	}
	readyClient.Timeout = Scale(2 * time.Second)
	ready := func(ctx context.Context, _ *process) bool { return httpOK(ctx, readyClient, e.Host+"/readyz") }
	return e.run(ctx, bin, "kube-apiserver", "ready", ready,
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
		"--cert-dir="+e.Dir,
		"--tls-cert-file="+p.certFile,
		"--tls-private-key-file="+p.keyFile,
		"--client-ca-file="+p.clientCA,
		"--authorization-mode=RBAC",
		"--service-account-issuer="+e.Issuer,
		"--service-account-key-file="+p.saPubFile,
		"--service-account-signing-key-file="+p.saKeyFile,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--allow-privileged=true",
		"--endpoint-reconciler-type=none",
		"--profiling=false",
	)
}

// startControllers runs kube-controller-manager with only these
// controllers, through the admin kubeconfig.
func (e *Env) startControllers(ctx context.Context, bin string, controllers []string) error {
	running := func(ctx context.Context, kcm *process) bool { return controllersReady(ctx, e, kcm, controllers) }
	return e.run(ctx, bin, "kube-controller-manager", "running", running,
		"--kubeconfig="+e.Kubeconfig,
		"--controllers="+strings.Join(controllers, ","),
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials=false",
	)
}

// run starts the server bin/name with args, keeps it for Stop, and waits
// until ready (state names it in the error) says so.
func (e *Env) run(ctx context.Context, bin, name, state string, ready func(context.Context, *process) bool, args ...string) error {
	p, err := startProcess(e.Dir, filepath.Join(bin, name), args...)
	if err != nil {
		return err
	}
	e.procs = append(e.procs, p)
	return p.waitFor(ctx, state, func(ctx context.Context) bool { return ready(ctx, p) })
}

// controllersReady: with the serviceaccount controller, the default service
// account of namespace default exists; otherwise (its health endpoint is
// HTTPS-only and off here) the process has stayed up for a second.
func controllersReady(ctx context.Context, env *Env, p *process, controllers []string) bool {
	for _, c := range controllers {
		if c == "serviceaccount" {
			_, err := env.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
			return err == nil
		}
	}
	return time.Since(p.started) > time.Second
}

func httpOK(ctx context.Context, c *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func writeKubeconfig(dir string, env *Env, p *pki) (string, error) {
	path := filepath.Join(dir, "admin.kubeconfig")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["testenv"] = &clientcmdapi.Cluster{Server: env.Host, CertificateAuthorityData: p.caPEM}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: p.adminCert, ClientKeyData: p.adminKey}
	cfg.Contexts["testenv"] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: "admin"}
	cfg.CurrentContext = "testenv"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("write admin kubeconfig: %w", err)
	}
	return path, nil
}

// Stop stops the servers in reverse order and removes Dir. Set
// MESH_CNI_TESTENV_KEEP=1 to keep Dir (logs) for reading.
func (e *Env) Stop() {
	if e == nil {
		return
	}
	for i := len(e.procs) - 1; i >= 0; i-- {
		e.procs[i].stop()
	}
	e.procs = nil
	if os.Getenv("MESH_CNI_TESTENV_KEEP") != "" {
		fmt.Fprintf(os.Stderr, "testenv: kept %s\n", e.Dir)
		return
	}
	if e.Dir != "" {
		_ = os.RemoveAll(e.Dir)
	}
}
