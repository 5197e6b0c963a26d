package metricsserver_test

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
	certutil "k8s.io/client-go/util/cert"

	"github.com/mesh-cni/mesh-cni/pkg/agent"
	"github.com/mesh-cni/mesh-cni/pkg/agent/metricsserver"
	"github.com/mesh-cni/mesh-cni/pkg/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The agent's own rules when bound beyond loopback (the chart's ClusterRole
// adds exactly these): create TokenReviews and SubjectAccessReviews.
var reviewRules = []rbacv1.PolicyRule{
	{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
	{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
}

// What a scraper is granted (the chart's optional metrics-reader role).
var readerRules = []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}

// serve starts the agent's metrics server on addr with the agent's /metrics
// handler and returns the port it listens on.
func serve(t *testing.T, o metricsserver.Options) (*metricsserver.Server, string) {
	t.Helper()
	o.Handler = agent.MetricsHandler()
	o.Log = slog.New(slog.DiscardHandler) // refusals are logged as errors
	s, err := metricsserver.Listen(o)
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

// Beyond loopback: HTTPS, 401 without a token, 403 for an account without
// get on /metrics, 200 with the agent's metrics for one with it. The agent
// itself runs as a service account that may only create the reviews.
func TestBeyondLoopbackAuthenticatesAndAuthorizes(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t, "metrics")
	env.BindClusterRole(t, ns, "agent", reviewRules)
	env.BindClusterRole(t, ns, "scraper", readerRules)
	agentTok := token(t, env, ns, "agent")
	strangerTok, scraperTok := token(t, env, ns, "stranger"), token(t, env, ns, "scraper")

	for _, addr := range []string{"0.0.0.0:0", ":0"} {
		t.Run(addr, func(t *testing.T) {
			s, port := serve(t, metricsserver.Options{Addr: addr, Kube: env.TokenConfig(agentTok)})
			if !s.Secure() {
				t.Fatalf("%s is beyond loopback but served without TLS and auth", addr)
			}
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
					t.Error("plain HTTP beyond loopback served the metrics")
				}
			}
		})
	}
}

// On loopback the metrics are plain HTTP without authentication, as before,
// and need no API access.
func TestLoopbackIsPlainHTTP(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0", "localhost:0"} {
		t.Run(addr, func(t *testing.T) {
			s, port := serve(t, metricsserver.Options{Addr: addr})
			if s.Secure() {
				t.Fatalf("%s: secure on loopback", addr)
			}
			host, _, _ := net.SplitHostPort(s.Addr().String())
			code, body := scrape(t, http.DefaultClient, "http://"+net.JoinHostPort(host, port)+"/metrics", "")
			if code != http.StatusOK || !strings.Contains(body, "mesh_cni_agent_ready") {
				t.Errorf("%d: %.200s", code, body)
			}
		})
	}
}

// Beyond loopback without API access the agent refuses rather than serve
// unauthenticated.
func TestBeyondLoopbackNeedsTheAPI(t *testing.T) {
	_, err := metricsserver.Listen(metricsserver.Options{Addr: "0.0.0.0:0", Handler: agent.MetricsHandler()})
	if err == nil || !strings.Contains(err.Error(), "no API access") {
		t.Fatalf("err %v, want a refusal", err)
	}
}

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:9197": true, "127.3.2.1:9197": true, "[::1]:9197": true, "localhost:9197": true,
		":9197": false, "0.0.0.0:9197": false, "[::]:9197": false, "10.0.0.5:9197": false,
		"[fd00::5]:9197": false, "node-a:9197": false, "[::ffff:127.0.0.1]:9197": true,
	} {
		got, err := metricsserver.Loopback(addr)
		if err != nil || got != want {
			t.Errorf("Loopback(%q) = %v, %v; want %v", addr, got, err, want)
		}
	}
	if _, err := metricsserver.Loopback("9197"); err == nil {
		t.Error("Loopback(9197): no error")
	}
}

// A certificate from --metrics-cert-dir (a mounted Secret) is served, and
// a scraper that trusts it verifies the connection.
func TestCertDir(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t, "metrics-cert")
	env.BindClusterRole(t, ns, "agent", reviewRules)
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
	_, port := serve(t, metricsserver.Options{Addr: "0.0.0.0:0", Kube: env.TokenConfig(token(t, env, ns, "agent")), CertDir: dir})
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

// An agent that may not create TokenReviews (its ClusterRole lacks them)
// serves no one: every token is answered 500 "Authentication failed".
func TestWithoutReviewPermissions(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t, "metrics-norbac")
	env.BindClusterRole(t, ns, "scraper", readerRules)
	_, port := serve(t, metricsserver.Options{Addr: "0.0.0.0:0", Kube: env.TokenConfig(token(t, env, ns, "agent"))})
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	code, body := scrape(t, insecure, "https://127.0.0.1:"+port+"/metrics", token(t, env, ns, "scraper"))
	if code != http.StatusInternalServerError || strings.Contains(body, "mesh_cni") {
		t.Errorf("%d, want 500 and no metrics: %.200s", code, body)
	}
}
