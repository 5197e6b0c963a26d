package main

import (
	"strings"
	"testing"
)

func TestFlagsEnvAndCommandLine(t *testing.T) {
	t.Setenv("MESH_CNI_CNI_BIN_DIR", "/host/home/kubernetes/bin")
	t.Setenv("MESH_CNI_CHAINED", "false")
	t.Setenv("MESH_CNI_REPAIR_POLICY", "label")
	t.Setenv("MESH_CNI_LOG_LEVEL", "debug")
	t.Setenv("NODE_NAME", "n1")
	c, err := parseFlags([]string{"--log-level=warn"})
	if err != nil {
		t.Fatal(err)
	}
	if c.cniBinDir != "/host/home/kubernetes/bin" || c.chained || c.repairPolicy != "label" || c.nodeName != "n1" {
		t.Errorf("env not applied: %+v", c)
	}
	if c.logLevel != "warn" {
		t.Errorf("command line should win over env: %s", c.logLevel)
	}
	if c.cniConfDir != "/host/etc/cni/net.d" || c.probeAddr != "127.0.0.1:9196" || c.metricsAddr != "127.0.0.1:9197" || !c.repair || c.uninstallMode != "auto" ||
		c.pluginBinary != "/mesh-cni" || c.podgetBinary != "/mesh-cni-podget" {
		t.Errorf("defaults: %+v", c)
	}
}

func TestFlagsRejected(t *testing.T) {
	for _, args := range [][]string{
		{"--repair-policy=kill"},
		{"--uninstall-mode=sometimes"},
		{"--log-level=loud"},
		{"stray"},
		{"--no-such-flag"},
		{"--podget-binary="},
		{"--hand-back-to=cilium"},
		{"--hand-back-to=istio-cni", "--migrate-from=istio-cni"},
	} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	// /metrics beyond loopback is the metrics proxy's job.
	for _, addr := range []string{":9197", "0.0.0.0:9197", "[::]:9197", "10.0.0.5:9197", "9197"} {
		_, err := parseFlags([]string{"--metrics-addr=" + addr})
		if err == nil {
			t.Errorf("--metrics-addr=%s accepted", addr)
		} else if addr != "9197" && !strings.Contains(err.Error(), "mesh-cni-metrics-proxy") {
			t.Errorf("--metrics-addr=%s: %v, want a pointer to the metrics proxy", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:9198", "[::1]:9197", "localhost:0"} {
		if _, err := parseFlags([]string{"--metrics-addr=" + addr}); err != nil {
			t.Errorf("--metrics-addr=%s: %v", addr, err)
		}
	}
	t.Setenv("MESH_CNI_CHAINED", "maybe")
	if _, err := parseFlags(nil); err == nil || !strings.Contains(err.Error(), "MESH_CNI_CHAINED") {
		t.Errorf("bad env value: %v", err)
	}
}

func TestHostPath(t *testing.T) {
	for in, want := range map[string]string{
		"/host/opt/cni/bin/mesh-cni": "/opt/cni/bin/mesh-cni",
		"/hostile/x":                 "/hostile/x",
		"/var/lib/x":                 "/var/lib/x",
	} {
		if got := hostPath(in); got != want {
			t.Errorf("%s: %s", in, got)
		}
	}
}
