package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/mesh-cni/mesh-cni/internal/agent/podcache"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// gate holds back what the agent's client reads from the API server: the
// events of its watch and, separately, its single-pod GETs.
type gate struct {
	mu             sync.Mutex
	cond           *sync.Cond
	watch, podGets bool // held
}

func newGate() *gate {
	g := &gate{}
	g.cond = sync.NewCond(&g.mu)
	return g
}

func (g *gate) set(watch, podGets bool) {
	g.mu.Lock()
	g.watch, g.podGets = watch, podGets
	g.mu.Unlock()
	g.cond.Broadcast()
}

func (g *gate) wait(held func() bool, ctx context.Context) error {
	stop := context.AfterFunc(ctx, g.cond.Broadcast)
	defer stop()
	g.mu.Lock()
	defer g.mu.Unlock()
	for held() && ctx.Err() == nil {
		g.cond.Wait()
	}
	return ctx.Err()
}

type gatedTransport struct {
	g  *gate
	rt http.RoundTripper
}

func (t gatedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	isWatch := r.URL.Query().Get("watch") == "true"
	if !isWatch && strings.Contains(r.URL.Path, "/pods/") {
		if err := t.g.wait(func() bool { return t.g.podGets }, r.Context()); err != nil {
			return nil, err
		}
	}
	resp, err := t.rt.RoundTrip(r)
	if err == nil && isWatch {
		resp.Body = &gatedBody{g: t.g, ctx: r.Context(), ReadCloser: resp.Body}
	}
	return resp, err
}

type gatedBody struct {
	g   *gate
	ctx context.Context
	io.ReadCloser
}

func (b *gatedBody) Read(p []byte) (int, error) {
	if err := b.g.wait(func() bool { return b.g.watch }, b.ctx); err != nil {
		return 0, err
	}
	return b.ReadCloser.Read(p)
}

// TestLookupStaleCache: a StatefulSet pod is recreated under its name,
// now with a Linkerd proxy, while the agent's watch lags, so its cache
// still holds the earlier, unmeshed pod. The runtime names the new pod
// by its UID: the plugin must never judge it from the earlier one. With
// the agent's API GET working, the agent answers with the new pod; with
// nothing that has the new pod within the lookup budget, ADD fails with
// code 11 and leaves no rule, and succeeds once the watch catches up.
// Real kube-apiserver, the agent's real pod cache on its socket.
func TestLookupStaleCache(t *testing.T) {
	kenv := testenv.Start(t)
	ns := kenv.Namespace(t, "stale")
	node := kenv.Node(t, "stale-node").Name
	g := newGate()
	cfg := rest.CopyConfig(kenv.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return gatedTransport{g: g, rt: rt} })
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	env := newNodeEnv(t) // no kubeconfig: the agent is the only source
	cache := podcache.New(client.CoreV1(), node)
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- podcache.Serve(sctx, cache, env.agentSocket) }()
	t.Cleanup(func() {
		g.set(false, false)
		stop()
		<-done
	})
	// The agent's half of the budget (2 s) outlasts the cache's wait for
	// its watch (podcache.DefaultWait), so the cache's own GET can answer.
	c := newChain(t, env, chainOpts{version: "1.0.0", subnet: 44, mesh: map[string]any{"lookupTimeout": "4s"}})

	always := corev1.ContainerRestartPolicyAlways
	proxyUID := int64(2102)
	create := func(meshed bool) string {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-0"},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "db", Image: "db"}}}}
		if meshed {
			p.Annotations = map[string]string{"linkerd.io/proxy-version": "edge-26.1.1"}
			p.Spec.InitContainers = []corev1.Container{{Name: "linkerd-proxy", Image: "proxy", RestartPolicy: &always,
				SecurityContext: &corev1.SecurityContext{RunAsUser: &proxyUID}}}
		}
		out, err := kenv.Client.CoreV1().Pods(ns).Create(ctx(t), p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return string(out.UID)
	}
	recreate := func(meshed bool) string {
		zero := int64(0)
		if err := kenv.Client.CoreV1().Pods(ns).Delete(ctx(t), "db-0", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
		return create(meshed)
	}
	cachedUID := func() string {
		p, err := podFromAgent(ctx(t), env.agentSocket, ns, "db-0", "")
		if err != nil {
			return ""
		}
		return p.UID
	}
	add := func(uid string) (*pod, error) {
		p := newPod(t, ns, "db-0", nil) // no annotations from the runtime: the lookup decides
		p.setUID(uid)
		_, err := c.add(p)
		if err == nil {
			t.Cleanup(func() { _ = c.del(p) })
		}
		return p, err
	}

	first := create(false)
	testenv.EventuallyTrue(t, "the agent caches the first pod", func() bool { return cachedUID() == first })

	// The watch lags; the agent's own GET still reaches the API server.
	g.set(true, false)
	second := recreate(true)
	if got := cachedUID(); got != first {
		t.Fatalf("the held watch let the cache move on to %s", got)
	}
	p, err := add(second)
	if err != nil {
		t.Fatalf("ADD of the recreated pod: %v", err)
	}
	if dump := ruleDump(t, p.netns.Path())["nft list ruleset"]; !strings.Contains(dump, "4143") {
		t.Fatalf("the recreated, meshed pod was judged from the earlier one: no Linkerd rules\n%s", dump)
	}

	// Recreated once more, and nothing can see it within the budget.
	g.set(true, true)
	third := recreate(true)
	p, err = add(third)
	var e *types.Error
	if !errors.As(err, &e) || e.Code != types.ErrTryAgainLater {
		t.Fatalf("ADD while nothing has the pod: got %v, want code 11", err)
	}
	if got := ours(ruleDump(t, p.netns.Path())); len(got) != 0 {
		t.Errorf("failed ADD left rules via %v", got)
	}
	if err := c.del(p); err != nil {
		t.Errorf("DEL after the failed ADD: %v", err)
	}
	// The watch catches up: the retry judges the runtime's pod.
	g.set(false, false)
	testenv.EventuallyTrue(t, "the watch delivers the third pod", func() bool { return cachedUID() == third })
	p, err = add(third)
	if err != nil {
		t.Fatalf("ADD after the watch caught up: %v", err)
	}
	if dump := ruleDump(t, p.netns.Path())["nft list ruleset"]; !strings.Contains(dump, "4143") {
		t.Errorf("no Linkerd rules after the watch caught up\n%s", dump)
	}
}
