package main

import (
	"flag"
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/helmcli"
)

// TestFlagDefaultsAreTheChart: the proxy run without flags is what the
// chart renders for its container (metrics beyond loopback, the only case
// the chart runs it): every flag the chart passes equals the default.
func TestFlagDefaultsAreTheChart(t *testing.T) {
	list, err := helmcli.ContainerArgs("../../charts/mesh-cni", helmcli.Options{Values: map[string]any{"metrics": map[string]any{"bindAddress": ""}}}, "metrics-proxy")
	if err != nil {
		t.Fatal(err)
	}
	args := map[string]string{}
	for _, s := range list {
		name, val, _ := strings.Cut(strings.TrimPrefix(s, "--"), "=")
		args[name] = val
	}
	if len(args) == 0 {
		t.Fatal("the chart rendered no metrics-proxy container with metrics.bindAddress=\"\"")
	}
	sameAs := map[string]string{"log-level": ""} // the chart's logLevel null: info
	newFlagSet(&config{}).VisitAll(func(f *flag.Flag) {
		got, ok := args[f.Name]
		delete(args, f.Name)
		switch {
		case !ok:
			t.Errorf("--%s: the chart does not set it; say why its default %q is safe", f.Name, f.DefValue)
		case got == f.DefValue:
		case !hasSame(sameAs, f.Name, got):
			t.Errorf("--%s: default %q, the chart renders %q", f.Name, f.DefValue, got)
		}
	})
	for name, val := range args {
		t.Errorf("the chart passes --%s=%s, which the proxy does not define", name, val)
	}
}

func hasSame(m map[string]string, name, v string) bool {
	w, ok := m[name]
	return ok && w == v
}
