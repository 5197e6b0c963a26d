package apiget

import (
	"context"
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

	"github.com/mesh-cni/mesh-cni/internal/agent/kubeconfig"
	"github.com/mesh-cni/mesh-cni/internal/lookup/podget"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// resetting resets the first n connections it accepts, as a busy API
// server does with handshakes, and counts every connection.
type resetting struct {
	net.Listener
	n, seen atomic.Int32
}

func (l *resetting) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.seen.Add(1) > l.n.Load() {
			return c, nil
		}
		_ = c.(*net.TCPConn).SetLinger(0)
		c.Close()
	}
}

const podJSON = `{"apiVersion":"v1","kind":"Pod","metadata":{"namespace":"shop","name":"web-1"},
 "spec":{"containers":[{"name":"web"}]}}`

// serve starts an HTTPS server answering the pod GET with token, behind a
// listener that resets the first resets connections, and returns the
// agent-written kubeconfig for it.
func serve(t *testing.T, token string, resets int32) (string, *resetting) {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("Authorization") != "Bearer "+token:
			http.Error(w, `{"kind":"Status","code":401}`, http.StatusUnauthorized)
		case r.URL.Path != "/api/v1/namespaces/shop/pods/web-1":
			http.Error(w, `{"kind":"Status","code":404}`, http.StatusNotFound)
		default:
			_, _ = w.Write([]byte(podJSON))
		}
	}))
	l := &resetting{Listener: srv.Listener}
	l.n.Store(resets)
	srv.Listener = l
	srv.StartTLS()
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	u, _ := url.Parse(srv.URL)
	host, port, _ := net.SplitHostPort(u.Host)
	b, err := kubeconfig.Build(kubeconfig.Options{Host: host, Port: port, TokenPath: write("token", []byte(token)),
		CAPath: write("ca.crt", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))})
	if err != nil {
		t.Fatal(err)
	}
	return write("kubeconfig", b), l
}

func get(t *testing.T, kc, name string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Timeout())
	defer cancel()
	pod, err := Pod(ctx, kc, "shop", name)
	if err == nil && (pod.Name != "web-1" || !pod.SpecKnown || len(pod.Containers) != 1) {
		t.Errorf("pod: %+v", pod)
	}
	return err
}

// A connection reset before any answer is tried once more; a second
// reset is the answer.
func TestPodRetriesOnceAfterReset(t *testing.T) {
	kc, l := serve(t, "s3cret", 1)
	if err := get(t, kc, "web-1"); err != nil {
		t.Fatalf("one reset: %v", err)
	}
	if n := l.seen.Load(); n != 2 {
		t.Errorf("one reset: %d connections, want 2", n)
	}
	kc, l = serve(t, "s3cret", 2)
	err := get(t, kc, "web-1")
	var op *net.OpError
	if !errors.As(err, &op) || !strings.Contains(err.Error(), "reset") {
		t.Errorf("two resets: got %v, want the connection error", err)
	}
	if n := l.seen.Load(); n != 2 {
		t.Errorf("two resets: %d connections, want 2", n)
	}
}

// An answer, even a refusal, is not retried.
func TestPodAnswersAreFinal(t *testing.T) {
	kc, l := serve(t, "s3cret", 0)
	if err := get(t, kc, "ghost"); !errors.Is(err, podget.ErrNotFound) {
		t.Errorf("unknown pod: got %v, want ErrNotFound", err)
	}
	b, _ := os.ReadFile(kc)
	_ = os.WriteFile(kc, []byte(strings.Replace(string(b), "s3cret", "stale", 1)), 0o600)
	if err := get(t, kc, "web-1"); err == nil || !strings.Contains(err.Error(), "HTTP 401") {
		t.Errorf("refused token: got %v, want HTTP 401", err)
	}
	if n := l.seen.Load(); n != 2 {
		t.Errorf("%d connections for two GETs", n)
	}
	if err := get(t, filepath.Join(t.TempDir(), "none"), "web-1"); err == nil || !strings.HasPrefix(err.Error(), "kubeconfig: ") {
		t.Errorf("missing kubeconfig: %v", err)
	}
}
