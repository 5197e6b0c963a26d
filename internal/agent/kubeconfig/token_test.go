package kubeconfig

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The kubeconfig holds a token of the named ServiceAccount from the real
// API server, kept until 80% of its lifetime and then replaced.
func TestTokenRequesterRotates(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t, "kc")
	now := time.Now()
	r := &TokenRequester{Client: env.Client.CoreV1(), Namespace: ns, Name: "default", TTL: time.Hour, Now: func() time.Time { return now }}
	out := filepath.Join(t.TempDir(), "kubeconfig")
	o := Options{Host: "10.96.0.1", Port: "443", Tokens: r}

	written := func() string {
		t.Helper()
		if _, err := Write(out, o); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		var c Config
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatal(err)
		}
		return c.Users[0].User.Token
	}
	whoami := func(tok string) string {
		t.Helper()
		rev, err := env.Client.AuthenticationV1().TokenReviews().Create(context.Background(), &authv1.TokenReview{Spec: authv1.TokenReviewSpec{Token: tok}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !rev.Status.Authenticated {
			t.Fatalf("written token not valid: %s", rev.Status.Error)
		}
		return rev.Status.User.Username
	}

	first := written()
	if u := whoami(first); u != "system:serviceaccount:"+ns+":default" {
		t.Fatalf("token authenticates as %s", u)
	}
	now = now.Add(40 * time.Minute)
	if again := written(); again != first {
		t.Fatal("token replaced before 80% of its lifetime")
	}
	now = now.Add(10 * time.Minute)
	second := written()
	if second == first {
		t.Fatal("token not replaced after 80% of its lifetime")
	}
	whoami(second)
}

// A failed request names the account and writes nothing.
func TestTokenRequesterError(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t, "kc")
	r := &TokenRequester{Client: env.Client.CoreV1(), Namespace: ns, Name: "missing"}
	out := filepath.Join(t.TempDir(), "kubeconfig")
	_, err := Write(out, Options{Host: "10.96.0.1", Port: "443", Tokens: r})
	if err == nil || !strings.Contains(err.Error(), ns+"/missing") {
		t.Fatalf("want an error naming %s/missing, got %v", ns, err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("kubeconfig written after a failed token request: %v", err)
	}
}

// Bound to the agent's Node, the plugin's tokens carry its name (what the
// chart's admission policy requires of them), stay bound when rotated, and
// stop working once the Node is deleted. A pod cannot hold them: the API
// server binds a token only to a pod running as the token's account.
func TestTokenRequesterBindsToNode(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	ns := env.Namespace(t, "kc")
	node := env.Node(t, "kc-node")
	if _, err := env.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "plugin"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	r := &TokenRequester{Client: env.Client.CoreV1(), Namespace: ns, Name: "plugin", Node: node.Name, Now: func() time.Time { return now }}
	review := func(tok string) *authv1.TokenReview {
		t.Helper()
		rev, err := env.Client.AuthenticationV1().TokenReviews().Create(ctx, &authv1.TokenReview{Spec: authv1.TokenReviewSpec{Token: tok}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	var toks []string
	for range 2 {
		tok, err := r.Token()
		if err != nil {
			t.Fatal(err)
		}
		rev := review(tok)
		extra := rev.Status.User.Extra
		if !rev.Status.Authenticated || len(extra["authentication.kubernetes.io/node-name"]) != 1 || extra["authentication.kubernetes.io/node-name"][0] != node.Name ||
			extra["authentication.kubernetes.io/node-uid"][0] != string(node.UID) {
			t.Fatalf("token not bound to node %s: authenticated %v, extra %v", node.Name, rev.Status.Authenticated, extra)
		}
		toks = append(toks, tok)
		now = now.Add(50 * time.Minute) // past 80%: the next call rotates
	}
	if toks[0] == toks[1] {
		t.Fatal("token not rotated")
	}

	// Why not the agent's pod: it runs as another account.
	pod, err := env.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "agent"},
		Spec:       corev1.PodSpec{NodeName: node.Name, Containers: []corev1.Container{{Name: "agent", Image: "agent:1"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = env.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "plugin", &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{
		BoundObjectRef: &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "different serviceaccount") {
		t.Errorf("plugin token bound to a pod of another account: %v; if the API server now allows it, bind to the agent's pod", err)
	}

	if err := env.Client.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyTrue(t, "token void once its Node is deleted", func() bool {
		return !review(toks[1]).Status.Authenticated
	})
}

// Before Kubernetes 1.31 the API server refuses to bind a token to a Node
// (feature gate ServiceAccountTokenNodeBinding off by default); the plugin
// then gets unbound tokens, and asks once. The API server here answers as
// such a version does (its v1.34 binaries cannot turn the gate off).
func TestTokenRequesterUnboundBefore131(t *testing.T) {
	var bound, unbound int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var tr authv1.TokenRequest
		if err := json.NewDecoder(r.Body).Decode(&tr); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if tr.Spec.BoundObjectRef != nil {
			bound++
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
				Reason: metav1.StatusReasonBadRequest, Code: http.StatusBadRequest,
				Message: `cannot bind token to a Node object as the "ServiceAccountTokenNodeBinding" feature-gate is disabled`})
			return
		}
		unbound++
		tr.Status = authv1.TokenRequestStatus{Token: fmt.Sprintf("t%d", unbound), ExpirationTimestamp: metav1.NewTime(time.Now().Add(time.Hour))}
		json.NewEncoder(w).Encode(&tr)
	}))
	defer srv.Close()
	c, err := corev1client.NewForConfig(&rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{ContentType: "application/json"}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	r := &TokenRequester{Client: c, Namespace: "ns", Name: "plugin", Node: "n1", Now: func() time.Time { return now }}
	for range 2 {
		if tok, err := r.Token(); err != nil || tok == "" {
			t.Fatalf("token with Node binding off: %q, %v", tok, err)
		}
		now = now.Add(50 * time.Minute)
	}
	if bound != 1 || unbound != 2 {
		t.Fatalf("requests: %d bound, %d unbound; want 1 bound (refused), then unbound only", bound, unbound)
	}
}
