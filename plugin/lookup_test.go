package main

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-cni/mesh-cni/internal/agent/kubeconfig"
	"github.com/mesh-cni/mesh-cni/internal/mesh"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// serveAgent runs the agent's pod-cache protocol on a real unix socket:
// GET /v1/pods/{ns}/{name} answers mesh.Pod JSON, 404 for unknown pods.
func serveAgent(t *testing.T, pods map[string]mesh.Pod, delay time.Duration) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/pods/{ns}/{name}", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(delay)
		p, ok := pods[r.PathValue("ns")+"/"+r.PathValue("name")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(p)
	})
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return sock
}

const podJSON = `{"apiVersion":"v1","kind":"Pod",
 "metadata":{"namespace":"shop","name":"web-1","uid":"u-1","labels":{"app":"web"},
   "annotations":{"linkerd.io/inject":"enabled","config.linkerd.io/skip-outbound-ports":"3306"}},
 "spec":{"securityContext":{"runAsUser":1000},
   "initContainers":[{"name":"linkerd-proxy","restartPolicy":"Always","securityContext":{"runAsUser":2102},
     "env":[{"name":"LINKERD2_PROXY_INBOUND_LISTEN_ADDR","value":"0.0.0.0:4143"}]}],
   "containers":[{"name":"web","args":["serve"]}]}}`

// serveAPI is an HTTPS server answering one pod GET, checking the bearer
// token as the API server does. chunked makes it stream the answer.
//
// This stands in for kube-apiserver only in this unit test; the plugin's
// integration test runs the same GET against a real kube-apiserver.
func serveAPI(t *testing.T, token string, chunked bool) (kubeconfigPath string, hits *int) {
	t.Helper()
	hits = new(int)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		*hits++
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, `{"kind":"Status","code":401}`, http.StatusUnauthorized)
			return
		}
		if r.URL.Path != "/api/v1/namespaces/shop/pods/web-1" {
			http.Error(w, `{"kind":"Status","code":404}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if chunked {
			half := len(podJSON) / 2
			_, _ = w.Write([]byte(podJSON[:half]))
			w.(http.Flusher).Flush()
			_, _ = w.Write([]byte(podJSON[half:]))
			return
		}
		_, _ = w.Write([]byte(podJSON))
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	u, _ := url.Parse(srv.URL)
	host, port, _ := net.SplitHostPort(u.Host)
	// The kubeconfig is written by the agent's own writer.
	b, err := kubeconfig.Build(kubeconfig.Options{
		Host: host, Port: port, TokenPath: write("token", token+"\n"), CAPath: write("ca.crt", string(ca)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return write("kubeconfig", string(b)), hits
}

func TestPodFromAgent(t *testing.T) {
	uid := int64(2102)
	want := mesh.Pod{Namespace: "shop", Name: "web-1", SpecKnown: true,
		Annotations: map[string]string{"linkerd.io/inject": "enabled"},
		Containers:  []mesh.Container{{Name: "linkerd-proxy", RunAsUser: &uid}, {Name: "web"}}}
	sock := serveAgent(t, map[string]mesh.Pod{"shop/web-1": want}, 0)

	got, err := podFromAgent(context.Background(), sock, "shop", "web-1", "")
	if err != nil {
		t.Fatal(err)
	}
	if !got.SpecKnown || len(got.Containers) != 2 || *got.Containers[0].RunAsUser != 2102 || got.Annotations["linkerd.io/inject"] != "enabled" {
		t.Errorf("got %+v", got)
	}
	if _, err := podFromAgent(context.Background(), sock, "shop", "other", ""); !errors.Is(err, errPodUnknown) {
		t.Errorf("unknown pod: got %v, want errPodUnknown", err)
	}
	if _, err := podFromAgent(context.Background(), filepath.Join(t.TempDir(), "none.sock"), "shop", "web-1", ""); err == nil {
		t.Error("missing socket: want an error")
	}
}

// podFromAPI runs the real mesh-cni-podget, as the plugin does.
func TestPodFromAPI(t *testing.T) {
	for _, chunked := range []bool{false, true} {
		kc, hits := serveAPI(t, "s3cret", chunked)
		pod, err := podFromAPI(context.Background(), kc, "shop", "web-1", "u-1")
		if err != nil {
			t.Fatalf("chunked=%v: %v", chunked, err)
		}
		if *hits != 1 {
			t.Errorf("want exactly one GET, got %d", *hits)
		}
		if pod.Namespace != "shop" || pod.Name != "web-1" || pod.UID != "u-1" || !pod.SpecKnown || pod.Labels["app"] != "web" ||
			pod.Annotations["config.linkerd.io/skip-outbound-ports"] != "3306" {
			t.Errorf("metadata: %+v", pod)
		}
		if len(pod.InitContainers) != 1 || pod.InitContainers[0].RestartPolicy != "Always" ||
			*pod.InitContainers[0].RunAsUser != 2102 || pod.InitContainers[0].Env["LINKERD2_PROXY_INBOUND_LISTEN_ADDR"] != "0.0.0.0:4143" {
			t.Errorf("init containers: %+v", pod.InitContainers)
		}
		// The pod-level runAsUser applies where the container sets none.
		if len(pod.Containers) != 1 || *pod.Containers[0].RunAsUser != 1000 || pod.Containers[0].Args[0] != "serve" {
			t.Errorf("containers: %+v", pod.Containers)
		}
	}
	kc, _ := serveAPI(t, "s3cret", false)
	if _, err := podFromAPI(context.Background(), kc, "shop", "missing", ""); !errors.Is(err, errPodUnknown) {
		t.Errorf("missing pod: got %v, want errPodUnknown", err)
	}
	// A token the server refuses is an error that says so.
	b, _ := os.ReadFile(kc)
	_ = os.WriteFile(kc, []byte(strings.Replace(string(b), "s3cret", "stale", 1)), 0o600)
	if _, err := podFromAPI(context.Background(), kc, "shop", "web-1", "u-1"); err == nil || !strings.Contains(err.Error(), "HTTP 401") {
		t.Errorf("refused token: got %v, want HTTP 401", err)
	}
}

func TestPodFromAPIRejectsWrongCA(t *testing.T) {
	kc, hits := serveAPI(t, "s3cret", false)
	b, _ := os.ReadFile(kc)
	var cfg map[string]any
	_ = json.Unmarshal(b, &cfg)
	cluster := cfg["clusters"].([]any)[0].(map[string]any)["cluster"].(map[string]any)
	delete(cluster, "certificate-authority-data") // now only system roots: the test CA is unknown
	b, _ = json.Marshal(cfg)
	_ = os.WriteFile(kc, b, 0o600)
	_, err := podFromAPI(context.Background(), kc, "shop", "web-1", "u-1")
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("want a certificate error, got %v", err)
	}
	if *hits != 0 {
		t.Errorf("no request may reach a server we cannot verify, got %d", *hits)
	}
}

func TestLookupFallsBackToAPI(t *testing.T) {
	kc, hits := serveAPI(t, "s3cret", false)
	// The agent does not know the pod yet (its cache lags): the API answers.
	sock := serveAgent(t, nil, 0)
	pod, err := lookupPod(context.Background(), sock, kc, "shop", "web-1", "u-1", 5*time.Second)
	if err != nil || pod.Name != "web-1" || *hits != 1 {
		t.Fatalf("got %+v, %v, %d API hits", pod, err, *hits)
	}
	// A hung agent gets half the budget, the API still answers in time.
	slow := serveAgent(t, map[string]mesh.Pod{"shop/web-1": {Namespace: "shop", Name: "web-1"}}, time.Minute)
	pod, err = lookupPod(context.Background(), slow, kc, "shop", "web-1", "u-1", 2*time.Second)
	if err != nil || !pod.SpecKnown {
		t.Fatalf("hung agent: got %+v, %v", pod, err)
	}
}

func TestLookupFailsWithBothReasons(t *testing.T) {
	sock := serveAgent(t, nil, 0)
	_, err := lookupPod(context.Background(), sock, "/nonexistent/kubeconfig", "shop", "web-1", "", time.Second)
	if err == nil || !strings.Contains(err.Error(), "agent socket: pod not found") || !strings.Contains(err.Error(), "API: kubeconfig") {
		t.Errorf("want both reasons, got %v", err)
	}
	// Both hang: the deadline ends the lookup.
	slow := serveAgent(t, map[string]mesh.Pod{}, time.Minute)
	hang, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer hang.Close()
	kc := filepath.Join(t.TempDir(), "kc")
	_ = os.WriteFile(kc, []byte(`{"current-context":"c","contexts":[{"name":"c","context":{"cluster":"k","user":"u"}}],
	  "clusters":[{"name":"k","cluster":{"server":"https://`+hang.Addr().String()+`"}}],"users":[{"name":"u","user":{"token":"t"}}]}`), 0o600)
	_, err = lookupPod(context.Background(), slow, kc, "shop", "web-1", "", 500*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "deadline") {
		t.Errorf("want a deadline error, got %v", err)
	}
}

// An agent whose cache still holds an earlier pod of the name (another
// UID) is asked again until it has the runtime's pod; when neither it nor
// the API has that pod within the budget, the lookup fails naming both
// UIDs.
func TestLookupOtherUID(t *testing.T) {
	kc, _ := serveAPI(t, "s3cret", false) // the API has web-1 as u-1
	var asks atomic.Int32
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		uid := "u-0" // the earlier pod, until the third ask
		if asks.Add(1) >= 3 {
			uid = "u-2"
		}
		if r.URL.Query().Get("uid") != "u-2" {
			t.Errorf("agent asked without the runtime's UID: %s", r.URL)
		}
		_ = json.NewEncoder(w).Encode(mesh.Pod{Namespace: "shop", Name: "web-1", UID: uid, SpecKnown: true})
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })

	pod, err := lookupPod(context.Background(), sock, kc, "shop", "web-1", "u-2", 10*time.Second)
	if err != nil || pod.UID != "u-2" || asks.Load() != 3 {
		t.Fatalf("got %+v, %v after %d asks; want u-2 at the third ask", pod, err, asks.Load())
	}

	asks.Store(-1000) // the agent never catches up; the API has u-1
	_, err = lookupPod(context.Background(), sock, kc, "shop", "web-1", "u-2", testenv.Scale(2*time.Second))
	if err == nil || !strings.Contains(err.Error(), "agent: the pod of that name has another UID: pod shop/web-1 is u-0, the runtime's is u-2") ||
		!strings.Contains(err.Error(), "pod shop/web-1 is u-1, the runtime's is u-2") {
		t.Errorf("want both stale answers named, got %v", err)
	}
}
