// Command mesh-cni-metrics-proxy serves the agent's /metrics on a node
// address as HTTPS, each request authenticated (TokenReview) and authorized
// (SubjectAccessReview: get on the non-resource URL /metrics) through the
// API server, and proxies the allowed ones to the agent's plain-HTTP metrics
// on loopback (--upstream). The chart runs it as a second container of the
// agent's pod when metrics.bindAddress is beyond loopback. Without API
// access (not in a pod) it refuses to start. Package internal/metricsproxy.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/rest"

	"github.com/mesh-cni/mesh-cni/internal/agent/kubeconfig"
	"github.com/mesh-cni/mesh-cni/internal/metricsproxy"
	"github.com/mesh-cni/mesh-cni/internal/version"
)

const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

type config struct {
	listenAddr, upstream, certDir string
	tokenPath, caPath, logLevel   string
}

// newFlagSet binds the flags to c; the defaults are what the chart renders
// for the metrics-proxy container (TestFlagDefaultsAreTheChart).
func newFlagSet(c *config) *flag.FlagSet {
	fs := flag.NewFlagSet("mesh-cni-metrics-proxy", flag.ContinueOnError)
	fs.StringVar(&c.listenAddr, "listen-addr", ":9197", "address to serve HTTPS /metrics on")
	fs.StringVar(&c.upstream, "upstream", "http://127.0.0.1:9198/metrics", "the agent's plain-HTTP metrics URL (its --metrics-addr)")
	fs.StringVar(&c.certDir, "cert-dir", "", "dir with tls.crt and tls.key, reloaded on change (empty: a self-signed certificate made at start)")
	fs.StringVar(&c.tokenPath, "token-path", saDir+"/token", "service account token")
	fs.StringVar(&c.caPath, "ca-path", saDir+"/ca.crt", "cluster CA")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn, error")
	return fs
}

func parseFlags(args []string) (*config, error) {
	c := &config{}
	fs := newFlagSet(c)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return c, nil
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "mesh-cni-metrics-proxy:", err)
		os.Exit(2)
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(cfg.logLevel)); err != nil {
		l = slog.LevelInfo
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
	slog.SetDefault(log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, log); err != nil {
		log.Error("exiting", "err", err)
		os.Exit(1) //nolint:gocritic // the process ends: nothing for stop to undo
	}
}

func run(ctx context.Context, cfg *config, log *slog.Logger) error {
	kube, err := restConfig(cfg)
	if err != nil {
		return fmt.Errorf("no API access, and every scrape is authenticated through the API server: %w", err)
	}
	s, err := metricsproxy.Listen(metricsproxy.Options{
		Addr: cfg.listenAddr, Upstream: cfg.upstream, Kube: kube, CertDir: cfg.certDir, Log: log,
	})
	if err != nil {
		return err
	}
	log.Info("serving /metrics", "addr", s.Addr().String(), "upstream", cfg.upstream, "version", version.Version)
	return s.Serve(ctx)
}

// restConfig reaches the API server as the pod's service account; the
// token file is read again as it rotates.
func restConfig(cfg *config) (*rest.Config, error) {
	o, err := kubeconfig.FromEnv(cfg.tokenPath, cfg.caPath)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(cfg.tokenPath); err != nil {
		return nil, fmt.Errorf("service account token: %w", err)
	}
	return &rest.Config{
		Host:            o.Server(),
		BearerTokenFile: o.TokenPath,
		TLSClientConfig: rest.TLSClientConfig{CAFile: o.CAPath},
		UserAgent:       "mesh-cni-metrics-proxy/" + version.Version,
		Timeout:         30 * time.Second,
	}, nil
}
