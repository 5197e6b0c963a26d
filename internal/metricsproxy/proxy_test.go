package metricsproxy_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"

	"github.com/mesh-cni/mesh-cni/internal/agent"
	"github.com/mesh-cni/mesh-cni/internal/metricsproxy"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The proxy's rules (the chart's ClusterRole adds exactly these when
// metrics listen beyond loopback): create TokenReviews and
// SubjectAccessReviews.
var reviewRules = []rbacv1.PolicyRule{
	{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
	{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
}

// What a scraper is granted (the chart's optional metrics-reader role).
var readerRules = []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}

// agentMetrics serves the agent's /metrics handler on loopback, as the
// agent does, and returns its URL.
func agentMetrics(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agent.ServeListener(ctx, ln, agent.MetricsHandler()) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return "http://" + ln.Addr().String() + "/metrics"
}

// serve starts the proxy in front of a real agent metrics handler and
// returns the port it listens on.
func serve(t *testing.T, o metricsproxy.Options) (*metricsproxy.Server, string) {
	t.Helper()
	if o.Upstream == "" {
		o.Upstream = agentMetrics(t)
	}
	o.Log = slog.New(slog.DiscardHandler) // refusals are logged as errors
	s, err := metricsproxy.Listen(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	_, port, _ := net.SplitHostPort(s.Addr().String())
	return s, port
}

// scrape GETs url with token (none when ""), returning status and body.
func scrape(t *testing.T, c *http.Client, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: body: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

func token(t *testing.T, env *testenv.Env, ns, sa string) string {
	t.Helper()
	tok, err := env.Token(context.Background(), ns, sa, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// HTTPS, 401 without a token, 403 for an account without get on /metrics,
// 200 with the agent's metrics for one with it. The proxy itself runs as a
// service account that may only create the reviews.
func TestAuthenticatesAndAuthorizes(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t, "metrics")
	env.BindClusterRole(t, ns, "proxy", reviewRules)
	env.BindClusterRole(t, ns, "scraper", readerRules)
	proxyTok := token(t, env, ns, "proxy")
	strangerTok, scraperTok := token(t, env, ns, "stranger"), token(t, env, ns, "scraper")

	for _, addr := range []string{"0.0.0.0:0", ":0"} {
		t.Run(addr, func(t *testing.T) {
			_, port := serve(t, metricsproxy.Options{Addr: addr, Kube: env.TokenConfig(proxyTok)})
			insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
			url := "https://127.0.0.1:" + port + "/metrics"
			cases := []struct {
				who, token string
				want       int
			}{
				{"no token", "", http.StatusUnauthorized},
				{"an account without get /metrics", strangerTok, http.StatusForbidden},
				{"an account granted get /metrics", scraperTok, http.StatusOK},
			}
			for _, c := range cases {
				code, body := scrape(t, insecure, url, c.token)
				if code != c.want {
					t.Errorf("%s: %d, want %d: %.200s", c.who, code, c.want, body)
				}
				if has := strings.Contains(body, "mesh_cni_agent_ready"); has != (c.want == http.StatusOK) {
					t.Errorf("%s: body has the metrics: %v: %.200s", c.who, has, body)
				}
			}
			// A token the TokenReview rejects: controller-runtime answers
			// 500 "Authentication failed" (the delegating authenticator
			// returns the review's error, not "unauthenticated"); refused
			// either way.
			if code, body := scrape(t, insecure, url, "not-a-token"); code != http.StatusInternalServerError || strings.Contains(body, "mesh_cni") {
				t.Errorf("a token the API server did not issue: %d, want 500 and no metrics: %.200s", code, body)
			}
			if resp, err := http.Get("http://127.0.0.1:" + port + "/metrics"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					t.Error("plain HTTP served the metrics")
				}
			}
			// Only /metrics is proxied, and only GET.
			req, _ := http.NewRequest(http.MethodPost, url, nil)
			req.Header.Set("Authorization", "Bearer "+scraperTok)
			if resp, err := insecure.Do(req); err != nil {
				t.Error(err)
			} else if resp.Body.Close(); resp.StatusCode == http.StatusOK {
				t.Error("POST /metrics answered 200")
			}
		})
	}
}

// Without API access the proxy refuses rather than serve unauthenticated.
func TestNeedsTheAPI(t *testing.T) {
	_, err := metricsproxy.Listen(metricsproxy.Options{Addr: "0.0.0.0:0", Upstream: "http://127.0.0.1:9198/metrics"})
	if err == nil || !strings.Contains(err.Error(), "no API access") {
		t.Fatalf("err %v, want a refusal", err)
	}
}

// An agent that does not answer: 502 for an allowed scraper, no hang.
func TestAgentDown(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t, "metrics-down")
	env.BindClusterRole(t, ns, "proxy", reviewRules)
	env.BindClusterRole(t, ns, "scraper", readerRules)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := "http://" + ln.Addr().String() + "/metrics"
	ln.Close()
	_, port := serve(t, metricsproxy.Options{Addr: "127.0.0.1:0", Upstream: up, Kube: env.TokenConfig(token(t, env, ns, "proxy"))})
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	if code, body := scrape(t, insecure, "https://127.0.0.1:"+port+"/metrics", token(t, env, ns, "scraper")); code != http.StatusBadGateway {
		t.Errorf("%d, want 502: %.200s", code, body)
	}
}

func TestBadUpstream(t *testing.T) {
	for _, up := range []string{"", "127.0.0.1:9198", "https://127.0.0.1:9198/metrics", "unix:///run/x"} {
		_, err := metricsproxy.Listen(metricsproxy.Options{Addr: "127.0.0.1:0", Upstream: up, Kube: &rest.Config{Host: "https://127.0.0.1:1"}})
		if err == nil || !strings.Contains(err.Error(), "upstream") {
			t.Errorf("upstream %q: err %v", up, err)
		}
	}
}

// A certificate from --cert-dir (a mounted Secret) is served, and
// a scraper that trusts it verifies the connection.
func TestCertDir(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t, "metrics-cert")
	env.BindClusterRole(t, ns, "proxy", reviewRules)
	env.BindClusterRole(t, ns, "scraper", readerRules)
	dir := t.TempDir()
	crt, key, err := certutil.GenerateSelfSignedCertKey("metrics.test", []net.IP{net.IPv4(127, 0, 0, 1)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"tls.crt": crt, "tls.key": key} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, port := serve(t, metricsproxy.Options{Addr: "0.0.0.0:0", Kube: env.TokenConfig(token(t, env, ns, "proxy")), CertDir: dir})
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(crt) {
		t.Fatal("no certificate in the PEM")
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	code, body := scrape(t, c, fmt.Sprintf("https://127.0.0.1:%s/metrics", port), token(t, env, ns, "scraper"))
	if code != http.StatusOK || !strings.Contains(body, "mesh_cni_agent_ready") {
		t.Errorf("%d: %.200s", code, body)
	}
}

// A proxy that may not create TokenReviews (its ClusterRole lacks them)
// serves no one: every token is answered 500 "Authentication failed".
func TestWithoutReviewPermissions(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t, "metrics-norbac")
	env.BindClusterRole(t, ns, "scraper", readerRules)
	_, port := serve(t, metricsproxy.Options{Addr: "0.0.0.0:0", Kube: env.TokenConfig(token(t, env, ns, "proxy"))})
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	code, body := scrape(t, insecure, "https://127.0.0.1:"+port+"/metrics", token(t, env, ns, "scraper"))
	if code != http.StatusInternalServerError || strings.Contains(body, "mesh_cni") {
		t.Errorf("%d, want 500 and no metrics: %.200s", code, body)
	}
}
