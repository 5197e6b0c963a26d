package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/mesh-cni/mesh-cni/internal/ctl/check"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
	"github.com/mesh-cni/mesh-cni/internal/version"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestUsage(t *testing.T) {
	tests := []struct {
		args []string
		code int
		err  string
	}{
		{nil, exitUsage, "Usage:"},
		{[]string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{[]string{"check", "-o", "xml"}, exitUsage, "-o xml: want text, wide, json, yaml"},
		{[]string{"check", "-o", "name"}, exitUsage, "-o name: want text"},
		{[]string{"check", "-o", "go-template={{.ok}}"}, exitUsage, "want text, wide, json, yaml, jsonpath"},
		{[]string{"check", "--no-such-flag"}, exitUsage, "unknown flag: --no-such-flag"},
		{[]string{"check", "extra"}, exitUsage, `unexpected argument "extra"`},
		{[]string{"explain", "--format", "xml"}, exitUsage, `--format "xml"`},
		{[]string{"explain", "--profile", "istio", "--config", "x"}, exitUsage, "exclude each other"},
		{[]string{"explain", "--annotation", "novalue"}, exitUsage, "KEY=VALUE"},
		{[]string{"explain", "--mesh-config", "{}"}, exitUsage, "--mesh-config needs --profile"},
		{[]string{"explain", "a", "b"}, exitUsage, `unexpected argument "b"`},
		{[]string{"explain", "--pod", "pod.yaml", "web-0"}, exitUsage, "--pod and a pod name exclude each other"},
		{[]string{"explain", "-n", "a", "b/web-0"}, exitUsage, "names namespace b, -n names a"},
		{[]string{"version", "--client"}, 0, ""},
		{[]string{"version", "--client", "-o", "xml"}, exitUsage, "-o xml"},
	}
	for _, tc := range tests {
		var out, errb bytes.Buffer
		if code := run(tc.args, &out, &errb); code != tc.code {
			t.Errorf("%q: exit %d, want %d (stderr %q)", tc.args, code, tc.code, errb.String())
		}
		if !strings.Contains(errb.String(), tc.err) {
			t.Errorf("%q: stderr %q does not contain %q", tc.args, errb.String(), tc.err)
		}
	}
}

func TestExplain(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"explain", "--profile", "linkerd", "--annotation", "linkerd.io/inject=enabled",
		"--annotation", "linkerd.io/proxy-version=stable", "--format", "nft"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "4140") {
		t.Errorf("explain output lacks the outbound port:\n%s", out.String())
	}
}

func TestCheckBadKubeconfig(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"check", "--kubeconfig", t.TempDir() + "/missing"}, &out, &errb)
	if code != exitFailed || !strings.Contains(out.String(), "✗ kubeconfig loaded") {
		t.Errorf("exit %d, output %q", code, out.String())
	}
}

// Against a real API server: an empty cluster fails the node checks, and
// -o json carries every check run.
func TestCheckAgainstAPIServer(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t, "mesh-cni")

	var out, errb bytes.Buffer
	code := run([]string{"check", "--pre", "-n", ns, "-o", "json", "--kubeconfig", env.Kubeconfig}, &out, &errb)
	if code != exitFailed {
		t.Fatalf("exit %d, want %d; stderr %s", code, exitFailed, errb.String())
	}
	var rep check.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out.String())
	}
	var typed struct{ APIVersion, Kind string }
	if json.Unmarshal(out.Bytes(), &typed); typed.Kind != "CheckReport" || typed.APIVersion != apiVersion {
		t.Errorf("-o json: kind %q apiVersion %q", typed.Kind, typed.APIVersion)
	}
	// -o yaml: the same report.
	var yout bytes.Buffer
	if code := run([]string{"check", "--pre", "-n", ns, "-o", "yaml", "--kubeconfig", env.Kubeconfig}, &yout, &errb); code != exitFailed {
		t.Fatalf("-o yaml: exit %d, want %d; stderr %s", code, exitFailed, errb.String())
	}
	var yrep check.Report
	if err := yaml.UnmarshalStrict(yout.Bytes(), &struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		*check.Report
	}{Report: &yrep}); err != nil {
		t.Fatalf("-o yaml does not parse as the report: %v\n%s", err, yout.String())
	}
	if !strings.HasPrefix(yout.String(), "apiVersion: "+apiVersion+"\n") || len(yrep.Checks) != len(rep.Checks) || yrep.Phase != "pre" || yrep.Namespace != ns {
		t.Errorf("-o yaml report %+v:\n%s", yrep, yout.String())
	}
	if rep.OK || rep.Phase != "pre" || rep.Namespace != ns || len(rep.Checks) != len(check.PreChecks()) {
		t.Fatalf("report %+v", rep)
	}
	got := map[string]check.Status{}
	for _, r := range rep.Checks {
		got[r.Name] = r.Status
	}
	for name, want := range map[string]check.Status{
		"API server reachable":                                           check.OK,
		"can create DaemonSets in namespace " + ns:                       check.OK,
		"namespace " + ns + " allows hostPath (Pod Security privileged)": check.Fail,
		"nodes run a supported OS/arch (linux/amd64, linux/arm64)":       check.Fail,
	} {
		if got[name] != want {
			t.Errorf("%s: %s, want %s", name, got[name], want)
		}
	}

	out.Reset()
	code = run([]string{"check", "--pre", "-n", ns, "--kubeconfig", env.Kubeconfig}, &out, &errb)
	if code != exitFailed || !strings.Contains(out.String(), "✗ namespace "+ns+" allows hostPath (Pod Security privileged): no pod-security.kubernetes.io/enforce label") {
		t.Errorf("exit %d:\n%s", code, out.String())
	}
	t.Logf("mesh-cnictl check --pre:\n%s", out.String())

	out.Reset()
	code = run([]string{"check", "--namespace", ns, "--kubeconfig", env.Kubeconfig}, &out, &errb)
	if code != exitFailed || !strings.Contains(out.String(), "✗ agent DaemonSet is ready on every schedulable node: no mesh-cni DaemonSet in namespace "+ns) {
		t.Errorf("exit %d:\n%s", code, out.String())
	}
}

// version prints the stamped release and commit.
func TestVersion(t *testing.T) {
	defer func(v, c string) { version.Version, version.Commit = v, c }(version.Version, version.Commit)
	version.Version, version.Commit = "v1.2.3", "feedc0de"
	var out, errb bytes.Buffer
	if code := run([]string{"version", "--client"}, &out, &errb); code != 0 || out.String() != "mesh-cnictl v1.2.3 (commit feedc0de)\n" {
		t.Errorf("version: exit %d, %q (stderr %q)", code, out.String(), errb.String())
	}
	out.Reset()
	if code := run([]string{"version", "--client", "-o", "jsonpath={.kind} {.client.version} {.client.commit}"}, &out, &errb); code != 0 || out.String() != "Version v1.2.3 feedc0de" {
		t.Errorf("version -o jsonpath: exit %d, %q (stderr %q)", code, out.String(), errb.String())
	}
}
