package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is what the API server needs: a CA that signs the serving cert and the
// admin client cert, and the service-account signing key pair.
type pki struct {
	caPEM       []byte
	adminCert   []byte
	adminKey    []byte
	caFile      string
	certFile    string
	keyFile     string
	saKeyFile   string
	saPubFile   string
	clientCA    string
	adminCN     string
	adminGroups []string
}

// newPKI writes every file into dir. ECDSA keys: fast to generate, and the
// API server signs service-account tokens with ES256 just as well.
func newPKI(dir string) (*pki, error) {
	p := &pki{
		caFile:      filepath.Join(dir, "ca.crt"),
		certFile:    filepath.Join(dir, "apiserver.crt"),
		keyFile:     filepath.Join(dir, "apiserver.key"),
		saKeyFile:   filepath.Join(dir, "sa.key"),
		saPubFile:   filepath.Join(dir, "sa.pub"),
		adminCN:     "testenv-admin",
		adminGroups: []string{"system:masters"},
	}
	p.clientCA = p.caFile
	ca, err := newCA(time.Now())
	if err != nil {
		return nil, err
	}
	p.caPEM = ca.certPEM
	servCert, servKey, err := ca.issue(2, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	})
	if err != nil {
		return nil, fmt.Errorf("create serving cert: %w", err)
	}
	p.adminCert, p.adminKey, err = ca.issue(3, &x509.Certificate{
		Subject:     pkix.Name{CommonName: p.adminCN, Organization: p.adminGroups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, fmt.Errorf("create admin cert: %w", err)
	}
	saKey, saPub, err := newSigningKey()
	if err != nil {
		return nil, fmt.Errorf("create service-account signing key: %w", err)
	}
	for path, data := range map[string][]byte{
		p.caFile:    p.caPEM,
		p.certFile:  servCert,
		p.keyFile:   servKey,
		p.saKeyFile: saKey,
		p.saPubFile: saPub,
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, fmt.Errorf("write %s: %w", path, err)
		}
	}
	return p, nil
}

// certAuthority signs the serving and client certs, all valid from an hour
// before now (clock skew between the test and the servers) for a day.
type certAuthority struct {
	now     time.Time
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

func newCA(now time.Time) (*certAuthority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "mesh-cni-testenv-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &certAuthority{now: now, cert: cert, key: key, certPEM: pemBlock("CERTIFICATE", der)}, nil
}

// issue signs tmpl (subject and usages filled in) for a new key.
func (ca *certAuthority) issue(serial int64, tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = big.NewInt(serial)
	tmpl.NotBefore = ca.now.Add(-time.Hour)
	tmpl.NotAfter = ca.now.Add(24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pemBlock("CERTIFICATE", der), pemBlock("EC PRIVATE KEY", keyDER), nil
}

// newSigningKey is the service-account token key pair, PEM encoded.
func newSigningKey() (keyPEM, pubPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, nil, err
	}
	return pemBlock("EC PRIVATE KEY", der), pemBlock("PUBLIC KEY", pub), nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
