package podcache

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/mesh-cni/mesh-cni/internal/mesh"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func createPod(t *testing.T, c kubernetes.Interface, ns, name, node string) *corev1.Pod {
	t.Helper()
	p := testPod()
	p.ObjectMeta = metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{"linkerd.io/inject": "enabled"}}
	p.Spec.NodeName = node
	p.Status = corev1.PodStatus{}
	p.Spec.Containers[0].Image = "app:1"
	p.Spec.Containers[1].Image = "batch:1"
	p.Spec.InitContainers[0].Image = "proxy:1"
	p.Spec.Volumes = nil
	out, err := c.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	return out
}

// serve starts Serve on a temp socket and returns an HTTP client for it.
func serve(t *testing.T, c kubernetes.Interface, node string) (*http.Client, string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "run", "agent.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, New(c.CoreV1(), node), sock) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		if _, err := os.Stat(sock); !os.IsNotExist(err) {
			t.Errorf("socket left behind after shutdown: %v", err)
		}
	})
	return unixClient(sock), sock
}

func unixClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			for {
				c, err := d.DialContext(ctx, "unix", sock)
				if err == nil || ctx.Err() != nil {
					return c, err
				}
				time.Sleep(10 * time.Millisecond) // socket not created yet
			}
		},
	}}
}

func get(t *testing.T, hc *http.Client, ns, name string) (int, *mesh.Pod) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Timeout())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent/v1/pods/"+ns+"/"+name, nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET %s/%s: %v", ns, name, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil
	}
	var p mesh.Pod
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return resp.StatusCode, &p
}

func TestServeCachedPod(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t, "podcache")
	env.Node(t, "pc-node-a")
	createPod(t, env.Client, ns, "web-0", "pc-node-a")
	hc, _ := serve(t, env.Client, "pc-node-a")

	code, p := get(t, hc, ns, "web-0")
	if code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	if !p.SpecKnown || p.Namespace != ns || p.Name != "web-0" || p.Annotations["linkerd.io/inject"] != "enabled" {
		t.Fatalf("unexpected pod %+v", p)
	}
	if len(p.InitContainers) != 1 || p.InitContainers[0].RestartPolicy != "Always" ||
		*p.InitContainers[0].RunAsUser != 2102 || *p.InitContainers[0].RunAsGroup != 3000 {
		t.Fatalf("init containers not resolved: %+v", p.InitContainers)
	}
	if len(p.Containers) != 2 || *p.Containers[1].RunAsGroup != 5 || *p.Containers[1].RunAsUser != 1000 {
		t.Fatalf("containers not resolved: %+v", p.Containers)
	}

	if code, _ := get(t, hc, ns, "nope"); code != http.StatusNotFound {
		t.Fatalf("unknown pod: status %d, want 404", code)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://agent/v1/pods/"+ns+"/web-0", nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST: status %d, want 405", resp.StatusCode)
	}
}

// Only this node's pods are cached; others are answered by the direct GET.
func TestCacheHoldsOnlyThisNode(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	ns := env.Namespace(t, "podcache")
	env.Node(t, "pc-node-b")
	env.Node(t, "pc-node-c")
	createPod(t, env.Client, ns, "mine", "pc-node-b")
	createPod(t, env.Client, ns, "theirs", "pc-node-c")

	c := New(env.Client.CoreV1(), "pc-node-b")
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go c.Run(rctx)
	waitUntil(t, c.HasSynced)
	if c.cached(ns+"/mine") == nil {
		t.Fatal("own pod not cached")
	}
	if c.cached(ns+"/theirs") != nil {
		t.Fatal("other node's pod cached")
	}
	c.Wait = 10 * time.Millisecond
	p, err := c.Get(ctx, ns, "theirs", "")
	if err != nil || p.Name != "theirs" {
		t.Fatalf("direct GET fallback: %v %+v", err, p)
	}
}

// A pod created while the lookup waits is answered from the watch: with an
// hour-long Wait the lookup can only succeed through the informer event.
func TestWaitsForNewPod(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t, "podcache")
	env.Node(t, "pc-node-d")
	c := New(env.Client.CoreV1(), "pc-node-d")
	c.Wait = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx)
	waitUntil(t, c.HasSynced)

	type result struct {
		p   *mesh.Pod
		err error
	}
	res := make(chan result, 1)
	go func() {
		gctx, gcancel := context.WithTimeout(ctx, testenv.Timeout())
		defer gcancel()
		p, err := c.Get(gctx, ns, "late", "")
		res <- result{p, err}
	}()
	waitUntil(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.waiters[ns+"/late"]) == 1
	})
	createPod(t, env.Client, ns, "late", "pc-node-d")
	r := <-res
	if r.err != nil || r.p.Name != "late" || !r.p.SpecKnown {
		t.Fatalf("waiting lookup: %v %+v", r.err, r.p)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.waiters) != 0 {
		t.Fatalf("waiters left behind: %v", c.waiters)
	}
}

// Before the cache has loaded (informer not running) lookups still work
// through one direct GET, and the request's context bounds the wait.
func TestFallbackAndDeadline(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t, "podcache")
	env.Node(t, "pc-node-e")
	createPod(t, env.Client, ns, "web", "pc-node-e")
	c := New(env.Client.CoreV1(), "pc-node-e") // never Run
	c.Wait = 20 * time.Millisecond
	ctx := context.Background()
	if p, err := c.Get(ctx, ns, "web", ""); err != nil || p.Name != "web" {
		t.Fatalf("fallback GET: %v %+v", err, p)
	}
	if _, err := c.Get(ctx, ns, "missing", ""); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing pod: %v, want ErrNotFound", err)
	}
	c.Wait = time.Hour
	dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := c.Get(dctx, ns, "web", ""); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("lookup past its deadline: %v", err)
	}
	// Over HTTP that is a 503 (unknown), not a 404 (absent).
	hctx, hcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer hcancel()
	rec := httptest.NewRecorder()
	c.Handler().ServeHTTP(rec, httptest.NewRequestWithContext(hctx, http.MethodGet, "/v1/pods/"+ns+"/web", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("lookup past its deadline answered %d, want 503", rec.Code)
	}
}

func TestUpdatesAndDeletes(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	ns := env.Namespace(t, "podcache")
	env.Node(t, "pc-node-f")
	createPod(t, env.Client, ns, "web", "pc-node-f")
	hc, _ := serve(t, env.Client, "pc-node-f")
	if code, _ := get(t, hc, ns, "web"); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	patch := []byte(`{"metadata":{"annotations":{"config.linkerd.io/skip-outbound-ports":"25"}}}`)
	if _, err := env.Client.CoreV1().Pods(ns).Patch(ctx, "web", "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool {
		_, p := get(t, hc, ns, "web")
		return p != nil && p.Annotations["config.linkerd.io/skip-outbound-ports"] == "25"
	})
	zero := int64(0)
	if err := env.Client.CoreV1().Pods(ns).Delete(ctx, "web", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool {
		code, _ := get(t, hc, ns, "web")
		return code == http.StatusNotFound
	})
}

func TestListenRefusesNonSocket(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.sock")
	if err := os.WriteFile(path, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(path); err == nil {
		t.Fatal("Listen replaced a regular file")
	}
	if b, _ := os.ReadFile(path); string(b) != "keep" {
		t.Fatal("regular file changed")
	}
	// A stale socket (left by a killed agent) is replaced.
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	l2, err := Listen(stale)
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	l2.Close()
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testenv.Timeout())
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", testenv.Timeout())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// BenchmarkLookup is one plugin lookup of a cached pod over the socket:
// connect, GET, decode, as the plugin does it.
func BenchmarkLookup(b *testing.B) {
	env := testenv.Start(b)
	ns := env.Namespace(b, "podcache")
	env.Node(b, "pc-bench")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := testPod()
	p.ObjectMeta = metav1.ObjectMeta{Name: "web", Namespace: ns}
	p.Spec.NodeName = "pc-bench"
	p.Status = corev1.PodStatus{}
	for i := range p.Spec.Containers {
		p.Spec.Containers[i].Image = "img:1"
	}
	p.Spec.InitContainers[0].Image = "img:1"
	p.Spec.Volumes = nil
	if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	sock := filepath.Join(b.TempDir(), "agent.sock")
	go func() { _ = Serve(ctx, New(env.Client.CoreV1(), "pc-bench"), sock) }()
	for {
		resp, err := unixClient(sock).Get("http://agent/v1/pods/" + ns + "/web")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	for b.Loop() {
		// A new client each time: the plugin is a new process per ADD.
		c := unixClient(sock)
		resp, err := c.Get("http://agent/v1/pods/" + ns + "/web")
		if err != nil {
			b.Fatal(err)
		}
		var mp mesh.Pod
		if err := json.NewDecoder(resp.Body).Decode(&mp); err != nil || !mp.SpecKnown {
			b.Fatalf("decode: %v", err)
		}
		resp.Body.Close()
	}
}

// A pod recreated under its name while the watch lags: the cache still
// holds the earlier pod (here the watch never runs; the store holds what
// the last event left). A lookup for the runtime's UID does not take the
// earlier pod: it waits, then asks the API server, which has the new one.
// A lookup without a UID still answers from the cache.
func TestRecreatedPodNotTakenForTheNew(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t, "podcache")
	env.Node(t, "pc-node-g")
	old := createPod(t, env.Client, ns, "db-0", "pc-node-g")
	c := New(env.Client.CoreV1(), "pc-node-g") // never Run: the watch lags for good
	if err := c.informer.GetStore().Add(old); err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	ctx := context.Background()
	if err := env.Client.CoreV1().Pods(ns).Delete(ctx, "db-0", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	cur := createPod(t, env.Client, ns, "db-0", "pc-node-g")
	c.Wait = 20 * time.Millisecond

	p, err := c.Get(ctx, ns, "db-0", string(cur.UID))
	if err != nil || p.UID != string(cur.UID) {
		t.Fatalf("lookup for the new UID %s: %v %+v (the earlier pod is %s)", cur.UID, err, p, old.UID)
	}
	if p, err := c.Get(ctx, ns, "db-0", ""); err != nil || p.UID != string(old.UID) {
		t.Fatalf("lookup without a UID: %v %+v", err, p)
	}
	// Over HTTP, with ?uid=.
	rec := httptest.NewRecorder()
	c.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/pods/"+ns+"/db-0?uid="+string(cur.UID), nil))
	var got mesh.Pod
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != http.StatusOK || got.UID != string(cur.UID) {
		t.Fatalf("HTTP lookup: %d %s", rec.Code, rec.Body)
	}
}
