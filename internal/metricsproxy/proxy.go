// Package metricsproxy is mesh-cni-metrics-proxy: it serves HTTPS on a
// node address, authenticates each request with a TokenReview and
// authorizes it with a SubjectAccessReview (get on the non-resource URL of
// the request, /metrics) through controller-runtime's metrics filter (built
// on k8s.io/apiserver's delegating authenticator and authorizer), and
// proxies GET /metrics to the agent's plain-HTTP metrics on loopback.
//
// The agent does not link this package: k8s.io/apiserver would add about
// 15 MiB of RSS and 20 MB of binary to every node's agent, used or not.
package metricsproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
)

// SelfSignedName is the DNS name in the self-signed certificate: a
// scraper that pins that certificate verifies it with this server name.
const SelfSignedName = "mesh-cni-metrics-proxy"

// Options of a metrics proxy.
type Options struct {
	// Addr is host:port to listen on with HTTPS.
	Addr string
	// Upstream is the agent's metrics URL, e.g. http://127.0.0.1:9198/metrics.
	Upstream string
	// Kube reaches the API server for the reviews; required.
	Kube *rest.Config
	// CertDir holds tls.crt and tls.key (a mounted Secret, reloaded when
	// it changes); "" serves a self-signed certificate made at start.
	CertDir string
	Log     *slog.Logger
}

// Server is a listening metrics proxy.
type Server struct {
	ln    net.Listener
	srv   *http.Server
	certs *certwatcher.CertWatcher // nil: self-signed
	log   *slog.Logger
}

// Listen checks the options, sets up TLS and the authentication and
// authorization filter, and opens the listener.
func Listen(o Options) (*Server, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Kube == nil {
		return nil, fmt.Errorf("metrics proxy on %s authenticates scrapers through the API server, and there is no API access", o.Addr)
	}
	up, err := url.Parse(o.Upstream)
	if err != nil || up.Scheme != "http" || up.Host == "" {
		return nil, fmt.Errorf("upstream %q: want http://host:port/path (the agent's loopback metrics)", o.Upstream)
	}
	h, err := protect(o.Kube, o.Log, proxy(up, o.Log))
	if err != nil {
		return nil, err
	}
	tc, certs, err := tlsConfig(o.CertDir, o.Addr)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", o.Addr, err)
	}
	s := &Server{ln: tls.NewListener(ln, tc), certs: certs, log: o.Log}
	// TLS handshake failures (a scraper without https) as debug JSON logs.
	s.srv = &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: slog.NewLogLogger(o.Log.Handler(), slog.LevelDebug)}
	return s, nil
}

// proxy answers GET (and HEAD) /metrics from up; nothing else.
func proxy(up *url.URL, log *slog.Logger) http.Handler {
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host, r.Out.URL.Path, r.Out.URL.RawPath = up.Scheme, up.Host, up.Path, ""
			r.Out.URL.RawQuery = up.RawQuery
			r.Out.Host = up.Host
			// The scraper's token is for the API server, not the agent.
			r.Out.Header.Del("Authorization")
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			log.Warn("agent metrics unreachable", "upstream", up.String(), "err", err)
			http.Error(w, "agent metrics unreachable", http.StatusBadGateway)
		},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		rp.ServeHTTP(w, r)
	})
	return mux
}

// protect wraps h in controller-runtime's TokenReview and
// SubjectAccessReview filter.
func protect(kube *rest.Config, log *slog.Logger, h http.Handler) (http.Handler, error) {
	hc, err := rest.HTTPClientFor(kube)
	if err != nil {
		return nil, fmt.Errorf("metrics auth: API client: %w", err)
	}
	filter, err := filters.WithAuthenticationAndAuthorization(kube, hc)
	if err != nil {
		return nil, fmt.Errorf("metrics auth: %w", err)
	}
	h, err = filter(logr.FromSlogHandler(log.Handler()).WithName("metrics"), h)
	if err != nil {
		return nil, fmt.Errorf("metrics auth: %w", err)
	}
	return h, nil
}

// tlsConfig serves the certificate in certDir, or a self-signed one.
func tlsConfig(certDir, addr string) (*tls.Config, *certwatcher.CertWatcher, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if certDir != "" {
		cw, err := certwatcher.New(filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key"))
		if err != nil {
			return nil, nil, fmt.Errorf("metrics certificate in %s: %w", certDir, err)
		}
		tc.GetCertificate = cw.GetCertificate
		return tc, cw, nil
	}
	var ips []net.IP
	if host, _, _ := net.SplitHostPort(addr); net.ParseIP(host) != nil && !net.ParseIP(host).IsUnspecified() {
		ips = append(ips, net.ParseIP(host))
	}
	crt, key, err := certutil.GenerateSelfSignedCertKey(SelfSignedName, ips, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("self-signed metrics certificate: %w", err)
	}
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return nil, nil, fmt.Errorf("self-signed metrics certificate: %w", err)
	}
	tc.Certificates = []tls.Certificate{pair}
	return tc, nil, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve serves until ctx ends.
func (s *Server) Serve(ctx context.Context) error {
	if s.certs != nil {
		go func() {
			if err := s.certs.Start(ctx); err != nil {
				s.log.Error("metrics certificate watch stopped", "err", err)
			}
		}()
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.srv.Shutdown(sctx) // stopping anyway
	}()
	if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics proxy: %w", err)
	}
	return nil
}
