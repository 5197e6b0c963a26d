package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
)

// Outside a pod (no KUBERNETES_SERVICE_HOST) the proxy refuses to start
// rather than serve the metrics unauthenticated.
func TestRefusesWithoutAPIAccess(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	cfg, err := parseFlags([]string{"--listen-addr=127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	err = run(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "no API access") {
		t.Fatalf("err %v, want a refusal", err)
	}
	// In a pod but without the token file: refused too.
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
	cfg.tokenPath = t.TempDir() + "/token"
	if err = run(context.Background(), cfg, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "no API access") {
		t.Fatalf("err %v, want a refusal", err)
	}
}

func TestFlags(t *testing.T) {
	c, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.listenAddr != ":9197" || c.upstream != "http://127.0.0.1:9198/metrics" || c.certDir != "" {
		t.Errorf("defaults: %+v", c)
	}
	if _, err := parseFlags([]string{"extra"}); err == nil {
		t.Error("a stray argument was accepted")
	}
}
