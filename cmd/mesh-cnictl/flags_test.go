package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/mesh-cni/mesh-cni/internal/version"
)

// kubectl's connection flags, each with its shorthand: a kubectl command
// line must keep meaning the same to the plugin.
var kubeFlagNames = map[string]string{
	"kubeconfig": "", "cache-dir": "", "context": "", "cluster": "", "user": "",
	"namespace": "n", "server": "s", "tls-server-name": "", "insecure-skip-tls-verify": "",
	"certificate-authority": "", "client-certificate": "", "client-key": "", "token": "",
	"as": "", "as-uid": "", "as-group": "", "as-user-extra": "", "request-timeout": "",
	"disable-compression": "", "proxy-url": "",
}

func TestKubeFlags(t *testing.T) {
	root := newRoot(io.Discard, io.Discard)
	fs := root.PersistentFlags()
	for name, short := range kubeFlagNames {
		f := fs.Lookup(name)
		if f == nil {
			t.Errorf("no --%s", name)
			continue
		}
		if f.Shorthand != short {
			t.Errorf("--%s: shorthand %q, want %q", name, f.Shorthand, short)
		}
	}
	// Never offered: basic authentication.
	for _, name := range []string{"username", "password"} {
		if fs.Lookup(name) != nil {
			t.Errorf("--%s is offered", name)
		}
	}
}

// The flags reach the client's config: server, token, impersonation with
// its extras, the timeout, and -n.
func TestKubeFlagsConfig(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	k := newKubeFlags()
	fs := pflag.NewFlagSet("kube", pflag.ContinueOnError)
	k.addFlags(fs)
	if err := fs.Parse([]string{"-s", "https://api.example:6443", "--token", "t0k", "--as", "alice",
		"--as-group", "g1", "--as-user-extra", "scopes=a", "--as-user-extra", "scopes=b",
		"--request-timeout", "7s", "-n", "shop"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := k.clientConfig().ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://api.example:6443" || cfg.BearerToken != "t0k" || cfg.Impersonate.UserName != "alice" ||
		strings.Join(cfg.Impersonate.Groups, ",") != "g1" || strings.Join(cfg.Impersonate.Extra["scopes"], ",") != "a,b" ||
		len(cfg.Impersonate.Extra) != 1 || cfg.Timeout.String() != "7s" {
		t.Errorf("host %q, token %q, impersonate %+v, timeout %v", cfg.Host, cfg.BearerToken, cfg.Impersonate, cfg.Timeout)
	}
	if ns, err := k.kubeNamespace(); err != nil || ns != "shop" || k.namespace() != "shop" {
		t.Errorf("namespace %q, %v; -n %q", ns, err, k.namespace())
	}
	for _, bad := range []string{"malformed", "=value"} {
		fs := pflag.NewFlagSet("kube", pflag.ContinueOnError)
		newKubeFlags().addFlags(fs)
		err := fs.Parse([]string{"--as-user-extra", bad})
		if err == nil || !strings.Contains(err.Error(), "want KEY=VALUE") {
			t.Errorf("--as-user-extra %q: %v, want a refusal", bad, err)
		}
	}
}

// Every -o format kubectl's printers had: kyaml, --template with the
// jsonpath formats, jsonpath-file, jsonpath-as-json, and missing keys
// refused on request.
func TestOutputFormats(t *testing.T) {
	defer func(v, c string) { version.Version, version.Commit = v, c }(version.Version, version.Commit)
	version.Version, version.Commit = "v1.2.3", "feedc0de"
	tmpl := filepath.Join(t.TempDir(), "tmpl")
	if err := os.WriteFile(tmpl, []byte("{.client.commit}"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"-o", "kyaml"}, 0, "---\n{\n  kind: \"Version\",\n  apiVersion: \"mesh-cni.io/v1\",\n  client: {\n    version: \"v1.2.3\",\n    commit: \"feedc0de\",\n  },\n}\n"},
		{[]string{"-o", "JSON"}, 0, "{\n    \"kind\": \"Version\",\n    \"apiVersion\": \"mesh-cni.io/v1\",\n    \"client\": {\n        \"version\": \"v1.2.3\",\n        \"commit\": \"feedc0de\"\n    }\n}\n"},
		{[]string{"-o", "yaml"}, 0, "apiVersion: mesh-cni.io/v1\nclient:\n  commit: feedc0de\n  version: v1.2.3\nkind: Version\n"},
		{[]string{"-o", "jsonpath", "--template", "{.kind}"}, 0, "Version"},
		{[]string{"-o", "jsonpath-file=" + tmpl}, 0, "feedc0de"},
		{[]string{"-o", "jsonpath-as-json={.client.version}"}, 0, "[\n    \"v1.2.3\"\n]\n"},
		{[]string{"-o", "jsonpath={.nope}"}, 0, ""},
		{[]string{"-o", "jsonpath={.nope}", "--allow-missing-template-keys=false"}, exitFailed, ""},
		{[]string{"-o", "jsonpath"}, exitUsage, ""},
		{[]string{"-o", "jsonpath={.x"}, exitUsage, ""},
		{[]string{"-o", "jsonpath-file=" + tmpl + ".missing"}, exitUsage, ""},
		{[]string{"-o", "jsonpath={.kind}", "--show-managed-fields"}, 0, "Version"},
	}
	for _, tc := range tests {
		var out, errb bytes.Buffer
		code := run(append([]string{"version", "--client"}, tc.args...), &out, &errb)
		if code != tc.code || (code == 0 && out.String() != tc.out) {
			t.Errorf("%q: exit %d, want %d; %q, want %q (stderr %q)", tc.args, code, tc.code, out.String(), tc.out, errb.String())
		}
	}
}
