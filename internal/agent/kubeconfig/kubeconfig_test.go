package kubeconfig

import (
	"encoding/base64"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"testing"
)

func TestServerBrackets(t *testing.T) {
	for host, want := range map[string]string{
		"10.96.0.1":    "https://10.96.0.1:443",
		"fd00:10::1":   "https://[fd00:10::1]:443",
		"[fd00:10::1]": "https://[fd00:10::1]:443",
		"api.example":  "https://api.example:443",
	} {
		got := Options{Host: host, Port: "443"}.Server()
		if got != want {
			t.Errorf("%s: got %s want %s", host, got, want)
		}
		if _, err := url.Parse(got); err != nil {
			t.Errorf("%s: %v", got, err)
		}
	}
}

func TestWriteAndRotate(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	ca := filepath.Join(dir, "ca.crt")
	out := filepath.Join(dir, "state", "kubeconfig")
	os.WriteFile(tok, []byte("tok-1\n"), 0o600)
	os.WriteFile(ca, []byte("CA PEM"), 0o600)
	o := Options{Host: "fd00::1", Port: "6443", TokenPath: tok, CAPath: ca}
	// The state dir is created when missing.
	if _, err := Write(out, o); err != nil {
		t.Fatal(err)
	}
	// A stale file with a loose mode must come back 0600.
	os.WriteFile(out, []byte("old"), 0o644)
	wrote, err := Write(out, o)
	if err != nil || !wrote {
		t.Fatalf("wrote=%v err=%v", wrote, err)
	}
	fi, _ := os.Stat(out)
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode())
	}
	var c Config
	b, _ := os.ReadFile(out)
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if c.Users[0].User.Token != "tok-1" || c.Clusters[0].Cluster.Server != "https://[fd00::1]:6443" {
		t.Errorf("got %s", b)
	}
	if d, _ := base64.StdEncoding.DecodeString(c.Clusters[0].Cluster.CertificateAuthorityData); string(d) != "CA PEM" {
		t.Errorf("ca %q", d)
	}
	if wrote, err := Write(out, o); err != nil || wrote {
		t.Errorf("unchanged token rewrote: %v %v", wrote, err)
	}
	os.WriteFile(tok, []byte("tok-2"), 0o600)
	if wrote, err := Write(out, o); err != nil || !wrote {
		t.Fatalf("rotation: %v %v", wrote, err)
	}
	b, _ = os.ReadFile(out)
	json.Unmarshal(b, &c)
	if c.Users[0].User.Token != "tok-2" {
		t.Errorf("token not rotated: %s", b)
	}
}

func TestErrors(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "kubeconfig")
	if _, err := Write(out, Options{Host: "h", Port: "1", TokenPath: filepath.Join(dir, "none")}); err == nil {
		t.Error("missing token accepted")
	}
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o600)
	if _, err := Write(out, Options{Host: "h", Port: "1", TokenPath: empty}); err == nil {
		t.Error("empty token accepted")
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Error("file written on error")
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := FromEnv("t", ""); err == nil {
		t.Error("no env accepted")
	}
}
