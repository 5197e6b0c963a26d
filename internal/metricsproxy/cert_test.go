package metricsproxy_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-cni/mesh-cni/internal/metricsproxy"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// serverName is the name the chart's cert-manager Certificate carries and
// scrapers verify (tls_config.server_name).
const serverName = "mesh-cni-metrics.monitoring.svc"

type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func serial(t *testing.T) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func newCA(t *testing.T, name string) *ca {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &ca{cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// leaf is a serving certificate for dnsName signed by c, as the PEM files
// of a kubernetes.io/tls Secret.
func (c *ca) leaf(t *testing.T, dnsName string) (crt, key []byte) {
	t.Helper()
	k := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: dnsName}, DNSNames: []string{dnsName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &k.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// secretDir writes crt and key into dir the way the kubelet updates a
// Secret volume: a new timestamped dir, the ..data symlink swapped to it
// with one rename, the old dir removed; tls.crt and tls.key link through
// ..data.
func secretDir(t *testing.T, dir string, crt, key []byte) {
	t.Helper()
	ts, err := os.MkdirTemp(dir, "..ts_")
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"tls.crt": crt, "tls.key": key} {
		if err := os.WriteFile(filepath.Join(ts, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tls.crt", "tls.key"} {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrExist) {
			t.Fatal(err)
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// verifying is a scraper that trusts only roots and checks name, with a
// fresh connection per request (a rotation shows on the next handshake).
func verifying(roots []byte, name string) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(roots)
	return &http.Client{Timeout: testenv.Timeout(), Transport: &http.Transport{
		DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: name},
	}}
}

// get scrapes url with token; err is the client's (a failed verification).
func get(c *http.Client, url, token string) (int, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// A certificate the user gives (a kubernetes.io/tls Secret, or the one
// cert-manager writes) is served: a scraper that trusts its CA and checks
// the server name gets the metrics; one that trusts another CA, or checks
// another name, fails verification. When the Secret is renewed (here with
// a leaf of another CA, as the kubelet swaps the files), the proxy serves
// the new certificate without a restart.
func TestUserCertificate(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t, "metrics-user-cert")
	env.BindClusterRole(t, ns, "proxy", reviewRules)
	env.BindClusterRole(t, ns, "scraper", readerRules)
	scraper := token(t, env, ns, "scraper")
	ca1, ca2 := newCA(t, "cluster-ca"), newCA(t, "other-ca")
	dir := t.TempDir()
	crt, key := ca1.leaf(t, serverName)
	secretDir(t, dir, crt, key)
	_, port := serve(t, metricsproxy.Options{Addr: "0.0.0.0:0", Kube: env.TokenConfig(token(t, env, ns, "proxy")), CertDir: dir})
	url := fmt.Sprintf("https://127.0.0.1:%s/metrics", port)

	if code, err := get(verifying(ca1.pem, serverName), url, scraper); err != nil || code != http.StatusOK {
		t.Fatalf("a scraper trusting the CA: %d %v", code, err)
	}
	for _, c := range []struct {
		who  string
		cl   *http.Client
		want string
	}{
		{"another CA", verifying(ca2.pem, serverName), "certificate signed by unknown authority"},
		{"another name", verifying(ca1.pem, "mesh-cni-metrics.other.svc"), "is valid for " + serverName + ", not"},
	} {
		if code, err := get(c.cl, url, scraper); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("a scraper trusting %s: %d %v, want a failed verification (%s)", c.who, code, err, c.want)
		}
	}

	// Renewal: the Secret now holds a leaf of ca2.
	crt2, key2 := ca2.leaf(t, serverName)
	start := time.Now()
	secretDir(t, dir, crt2, key2)
	testenv.Eventually(t, "the renewed certificate is served", func() error {
		_, err := get(verifying(ca2.pem, serverName), url, scraper)
		return err
	})
	t.Logf("renewed certificate served after %v", time.Since(start).Round(time.Millisecond))
	if _, err := get(verifying(ca1.pem, serverName), url, scraper); err == nil {
		t.Error("the replaced certificate is still served")
	}
}

// The self-signed default can be pinned as the chart's NOTES say: the
// chain the proxy presents, trusted as the CA, with SelfSignedName as the
// server name. A restarted proxy makes a new one, which the pin refuses.
func TestSelfSignedPinned(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t, "metrics-pin")
	env.BindClusterRole(t, ns, "proxy", reviewRules)
	env.BindClusterRole(t, ns, "scraper", readerRules)
	scraper, proxyTok := token(t, env, ns, "scraper"), token(t, env, ns, "proxy")
	presented := func(port string) []byte {
		conn, err := tls.Dial("tcp", "127.0.0.1:"+port, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var out []byte
		for _, c := range conn.ConnectionState().PeerCertificates {
			out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
		}
		return out
	}
	_, port := serve(t, metricsproxy.Options{Addr: "0.0.0.0:0", Kube: env.TokenConfig(proxyTok)})
	pin := presented(port)
	url := "https://127.0.0.1:" + port + "/metrics"
	if code, err := get(verifying(pin, metricsproxy.SelfSignedName), url, scraper); err != nil || code != http.StatusOK {
		t.Fatalf("pinned self-signed certificate: %d %v", code, err)
	}
	_, port2 := serve(t, metricsproxy.Options{Addr: "0.0.0.0:0", Kube: env.TokenConfig(proxyTok)})
	if _, err := get(verifying(pin, metricsproxy.SelfSignedName), "https://127.0.0.1:"+port2+"/metrics", scraper); err == nil {
		t.Error("a restarted proxy's new certificate passed the old pin")
	}
}
