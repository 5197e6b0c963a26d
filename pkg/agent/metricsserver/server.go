// Package metricsserver serves the agent's /metrics. On a loopback address
// it is plain HTTP, as only processes on the node reach it. Beyond loopback
// it is HTTPS, and every request is authenticated with a TokenReview and
// authorized with a SubjectAccessReview (get on the non-resource URL of the
// request, /metrics) by controller-runtime's metrics filter, which is built
// on k8s.io/apiserver's delegating authenticator and authorizer.
//
// Only the agent links this package: it pulls in k8s.io/apiserver, which
// the CNI plugin must not carry.
package metricsserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
)

// Options of a metrics server.
type Options struct {
	// Addr is host:port. A host in 127.0.0.0/8, ::1 or "localhost" is
	// loopback; anything else ("" and 0.0.0.0 included) is not.
	Addr string
	// Handler serves /metrics.
	Handler http.Handler
	// Kube reaches the API server for the reviews; required beyond loopback.
	Kube *rest.Config
	// CertDir holds tls.crt and tls.key (a mounted Secret, reloaded when
	// it changes); "" serves a self-signed certificate made at start.
	CertDir string
	Log     *slog.Logger
}

// Server is a listening metrics server.
type Server struct {
	ln     net.Listener
	srv    *http.Server
	secure bool
	certs  *certwatcher.CertWatcher // nil: self-signed or plain
	log    *slog.Logger
}

// Loopback tells whether addr's host only takes connections from this
// host's loopback interface.
func Loopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("metrics address %q: %w", addr, err)
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

// Listen opens the listener and, beyond loopback, sets up TLS and the
// authentication and authorization filter.
func Listen(o Options) (*Server, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	loop, err := Loopback(o.Addr)
	if err != nil {
		return nil, err
	}
	s := &Server{secure: !loop, log: o.Log}
	h := o.Handler
	var tc *tls.Config
	if s.secure {
		if o.Kube == nil {
			return nil, fmt.Errorf("metrics on %s (beyond loopback) authenticate scrapers through the API server, and there is no API access", o.Addr)
		}
		if h, err = protect(o.Kube, o.Log, h); err != nil {
			return nil, err
		}
		if tc, s.certs, err = tlsConfig(o.CertDir, o.Addr); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", o.Addr, err)
	}
	if tc != nil {
		ln = tls.NewListener(ln, tc)
	}
	s.ln = ln
	// TLS handshake failures (a scraper without https) as debug JSON logs.
	s.srv = &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: slog.NewLogLogger(o.Log.Handler(), slog.LevelDebug)}
	return s, nil
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
	crt, key, err := certutil.GenerateSelfSignedCertKey("mesh-cni-agent", ips, nil)
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

// Secure tells whether it serves HTTPS with authentication.
func (s *Server) Secure() bool { return s.secure }

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
		s.srv.Shutdown(sctx)
	}()
	if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics server: %w", err)
	}
	return nil
}
