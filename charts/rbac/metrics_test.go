package rbac

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mesh-cni/mesh-cni/internal/agent"
	"github.com/mesh-cni/mesh-cni/internal/metricsproxy"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// allowed asks the API server (as admin) whether ns/sa may do what attrs
// or url says.
func allowed(t *testing.T, env *testenv.Env, ns, sa string, attrs *authzv1.ResourceAttributes, url string) bool {
	t.Helper()
	spec := authzv1.SubjectAccessReviewSpec{
		User:               "system:serviceaccount:" + ns + ":" + sa,
		Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
		ResourceAttributes: attrs,
	}
	if url != "" {
		spec.NonResourceAttributes = &authzv1.NonResourceAttributes{Path: url, Verb: "get"}
	}
	r, err := env.Client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(),
		&authzv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return r.Status.Allowed
}

var (
	tokenReviews = &authzv1.ResourceAttributes{Group: "authentication.k8s.io", Resource: "tokenreviews", Verb: "create"}
	accessReview = &authzv1.ResourceAttributes{Group: "authorization.k8s.io", Resource: "subjectaccessreviews", Verb: "create"}
)

// The chart's RBAC with metrics.bindAddress beyond loopback is what the
// metrics proxy container needs: running as the chart's ServiceAccount (the
// pod's, which the agent container shares) in front of the agent's real
// metrics handler, it refuses a scrape without a token (401) and one by an
// account not bound to the chart's metrics-reader role (403), and proxies
// one that is (200). On loopback (the default) there is no proxy and the
// account may create no reviews at all.
func TestChartRBACCoversMetrics(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()

	ns := env.Namespace(t, "mesh-cni")
	sa, _ := install(t, env, "mesh-cni-loopback", ns, nil)
	testenv.EventuallyTrue(t, "the chart's bindings active", func() bool {
		return allowed(t, env, ns, sa, &authzv1.ResourceAttributes{Resource: "pods", Verb: "list"}, "")
	})
	if allowed(t, env, ns, sa, tokenReviews, "") || allowed(t, env, ns, sa, accessReview, "") {
		t.Error("metrics on loopback (default): the chart's ServiceAccount may still create TokenReviews or SubjectAccessReviews")
	}

	ns = env.Namespace(t, "mesh-cni")
	node := "rbac-metrics"
	env.Node(t, node)
	sa, _ = install(t, env, "mesh-cni-metrics", ns, map[string]any{"metrics": map[string]any{"bindAddress": ""}})
	if _, err := env.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-scraper"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "mesh-cni-metrics-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "scraper"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Wait here, not in the scrapes: the proxy caches a denial for 30 s.
	testenv.EventuallyTrue(t, "the chart's and the scraper's bindings active", func() bool {
		return allowed(t, env, ns, sa, tokenReviews, "") && allowed(t, env, ns, sa, accessReview, "") &&
			allowed(t, env, ns, "scraper", nil, "/metrics")
	})

	// The agent's plain-HTTP metrics on loopback, as in the pod.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	agentDone := make(chan error, 1)
	go func() { agentDone <- agent.ServeListener(sctx, ln, agent.MetricsHandler()) }()

	proxyCfg, _ := env.PodClient(t, ns, sa, "mesh-cni-agent-"+node, node)
	s, err := metricsproxy.Listen(metricsproxy.Options{Addr: "0.0.0.0:0", Upstream: "http://" + ln.Addr().String() + "/metrics", Kube: proxyCfg})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(sctx) }()
	defer func() {
		cancel()
		for _, c := range []chan error{done, agentDone} {
			if err := <-c; err != nil {
				t.Error(err)
			}
		}
	}()
	_, port, _ := net.SplitHostPort(s.Addr().String())
	url := "https://127.0.0.1:" + port + "/metrics"

	for who, want := range map[string]int{"": http.StatusUnauthorized, "stranger": http.StatusForbidden, "scraper": http.StatusOK} {
		tok := ""
		if who != "" {
			if tok, err = env.Token(ctx, ns, who, time.Hour); err != nil {
				t.Fatal(err)
			}
		}
		code, body, err := get(url, tok)
		if err != nil {
			t.Fatal(err)
		}
		if code != want || strings.Contains(body, "mesh_cni_agent_ready") != (want == http.StatusOK) {
			t.Errorf("scrape as %q: %d, want %d: %.200s", who, code, want, body)
		}
	}
}

// get GETs url over TLS without verifying the proxy's self-signed
// certificate, with a bearer token unless it is "".
func get(url, token string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{Timeout: testenv.Timeout(), Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}
