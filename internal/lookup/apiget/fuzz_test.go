package apiget

import (
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/agent/kubeconfig"
)

// testCA is the PEM of httptest's server certificate, the CA the other
// tests' kubeconfigs trust.
func testCA(t testing.TB) ([]byte, tls.Certificate) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), srv.TLS.Certificates[0]
}

// strs collects every string of a JSON value, keys and values.
func strs(v any, out map[string]bool) {
	switch v := v.(type) {
	case string:
		out[v] = true
	case []any:
		for _, e := range v {
			strs(e, out)
		}
	case map[string]any:
		for k, e := range v {
			out[k] = true
			strs(e, out)
		}
	}
}

// FuzzKubeconfig: no input panics the parser, and what it accepts comes
// from the input: the server's host is that of one of its strings, the token is
// one of its strings (or the token file's content), TLS is for that host.
func FuzzKubeconfig(f *testing.F) {
	ca, _ := testCA(f)
	dir := f.TempDir()
	tok, caPath := filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	os.WriteFile(tok, []byte("s3cret\n"), 0o600)
	os.WriteFile(caPath, ca, 0o600)
	for _, o := range []kubeconfig.Options{
		{Host: "127.0.0.1", Port: "6443", TokenPath: tok, CAPath: caPath},
		{Host: "fd00::1", Port: "443", TokenPath: tok},
		{Host: "kubernetes.default.svc", Port: "443", TokenPath: tok, CAPath: caPath},
	} {
		b, err := kubeconfig.Build(o)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	caData := base64.StdEncoding.EncodeToString(ca)
	for _, s := range []string{
		`{"current-context":"c","clusters":[{"name":"k","cluster":{"server":"https://10.0.0.1/prefix/","certificate-authority":"/ca"}}],` +
			`"users":[{"name":"u","user":{"tokenFile":"/token"}}],"contexts":[{"name":"c","context":{"cluster":"k","user":"u"}}]}`,
		`{"clusters":[{"name":"k","cluster":{"server":"http://[::1]:8080","insecure-skip-tls-verify":true}}],` +
			`"users":[{"name":"u","user":{"client-certificate-data":"` + caData + `","client-key-data":"eA=="}}],"contexts":[{"name":"x","context":{"cluster":"k","user":"u"}}]}`,
		`{"current-context":"none","contexts":[]}`,
		`{"clusters":[{"name":"k","cluster":{"server":"ftp://h"}}],"contexts":[{"name":"x","context":{"cluster":"k"}}]}`,
		`not json`,
	} {
		f.Add([]byte(s))
	}
	file := append([]byte("from-file\n"), ca...)
	read := func(string) ([]byte, error) { return file, nil }
	f.Fuzz(func(t *testing.T, b []byte) {
		ac, err := parseKubeconfig("kc", b, read)
		if err != nil {
			if ac != nil {
				t.Fatalf("error %v with a client", err)
			}
			return
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("accepted input that is not JSON: %v", err)
		}
		in := map[string]bool{}
		strs(v, in)
		host, port, err := net.SplitHostPort(ac.host)
		if err != nil || port == "" || host == "" {
			t.Fatalf("host %q is not host:port: %v", ac.host, err)
		}
		found := false
		for s := range in {
			u, err := url.Parse(s)
			found = found || (err == nil && u.Hostname() == host)
		}
		if !found {
			t.Fatalf("host %q is in none of the input's strings", host)
		}
		if ac.scheme != "https" && ac.scheme != "http" {
			t.Fatalf("scheme %q", ac.scheme)
		}
		if ac.token != "" && !in[ac.token] && ac.token != strings.TrimSpace(string(file)) {
			t.Fatalf("token %q is not from the input", ac.token)
		}
		if ac.tls == nil || ac.tls.ServerName != host {
			t.Fatalf("TLS for %q, want %q", ac.tls.ServerName, host)
		}
	})
}

// A token or CA file larger than maxFile (an endless one like /dev/zero
// would exhaust memory) is refused.
func TestKubeconfigFileCap(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "token")
	if err := os.WriteFile(big, make([]byte, maxFile+1), 0o600); err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(dir, "kc")
	os.WriteFile(kc, []byte(`{"clusters":[{"name":"k","cluster":{"server":"https://h"}}],`+
		`"users":[{"name":"u","user":{"tokenFile":"`+big+`"}}],"contexts":[{"name":"c","context":{"cluster":"k","user":"u"}}]}`), 0o600)
	if _, err := loadKubeconfig(kc); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("token file of %d bytes: %v, want refused as too large", maxFile+1, err)
	}
	os.WriteFile(big, make([]byte, maxFile), 0o600)
	if _, err := loadKubeconfig(kc); err != nil {
		t.Fatalf("token file of %d bytes: %v", maxFile, err)
	}
}
