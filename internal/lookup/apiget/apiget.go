// Package apiget is the plugin's last-resort pod lookup: one GET of the pod
// from the API server through the kubeconfig the agent writes. It links
// crypto/tls, so only mesh-cni-podget (./cmd/mesh-cni-podget) uses it; the plugin execs
// that helper (internal/lookup/podget) and stays free of TLS.
package apiget

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/mesh-cni/mesh-cni/internal/lookup/podget"
	"github.com/mesh-cni/mesh-cni/internal/mesh"
)

// Pod GETs the pod ns/name through the kubeconfig at kubeconfigPath. When
// the connection fails before any answer (a busy API server resets
// handshakes) it tries once more, within ctx. A 404 is podget.ErrNotFound.
func Pod(ctx context.Context, kubeconfigPath, ns, name string) (mesh.Pod, error) {
	pod, err := getPod(ctx, kubeconfigPath, ns, name)
	var conn *net.OpError
	if err != nil && errors.As(err, &conn) && ctx.Err() == nil {
		pod, err = getPod(ctx, kubeconfigPath, ns, name)
	}
	return pod, err
}

// kubeconfig is the part of a kubeconfig the plugin uses. The agent writes
// it as JSON so encoding/json reads it and client-go stays out of the binary.
type kubeconfigFile struct {
	CurrentContext string `json:"current-context"`
	Clusters       []struct {
		Name    string `json:"name"`
		Cluster struct {
			Server                   string `json:"server"`
			CertificateAuthority     string `json:"certificate-authority"`
			CertificateAuthorityData string `json:"certificate-authority-data"`
			InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify"`
		} `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string `json:"name"`
		User struct {
			Token                 string `json:"token"`
			TokenFile             string `json:"tokenFile"`
			ClientCertificateData string `json:"client-certificate-data"`
			ClientKeyData         string `json:"client-key-data"`
		} `json:"user"`
	} `json:"users"`
	Contexts []struct {
		Name    string `json:"name"`
		Context struct {
			Cluster string `json:"cluster"`
			User    string `json:"user"`
		} `json:"context"`
	} `json:"contexts"`
}

// apiClient is what one GET needs: server address, TLS and the bearer token.
type apiClient struct {
	host   string // host:port
	scheme string
	prefix string // path prefix of the server URL, usually empty
	token  string
	tls    *tls.Config
}

// maxFile caps what is read of the kubeconfig and the files it names (a
// token or CA is a few kB): a path that names an endless file (/dev/zero)
// is an error, not a lookup that eats the node's memory.
const maxFile = 1 << 20

// readFile reads path, refusing more than maxFile bytes.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxFile {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxFile)
	}
	return b, nil
}

func loadKubeconfig(path string) (*apiClient, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return parseKubeconfig(path, b, readFile)
}

// parseKubeconfig reads the client from kubeconfig b (named path in
// errors); read loads the token and CA files it names.
func parseKubeconfig(path string, b []byte, read func(string) ([]byte, error)) (*apiClient, error) {
	var kc kubeconfigFile
	if err := json.Unmarshal(b, &kc); err != nil {
		return nil, fmt.Errorf("kubeconfig %s is not JSON: %w", path, err)
	}
	clusterName, userName := "", ""
	for _, c := range kc.Contexts {
		if c.Name == kc.CurrentContext || (kc.CurrentContext == "" && len(kc.Contexts) == 1) {
			clusterName, userName = c.Context.Cluster, c.Context.User
		}
	}
	if clusterName == "" {
		return nil, fmt.Errorf("kubeconfig %s: no context %q", path, kc.CurrentContext)
	}
	ac := &apiClient{}
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12}
	found := false
	for _, c := range kc.Clusters {
		if c.Name != clusterName {
			continue
		}
		found = true
		u, err := url.Parse(c.Cluster.Server)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Hostname() == "" {
			return nil, fmt.Errorf("kubeconfig %s: bad server %q", path, c.Cluster.Server)
		}
		ac.scheme, ac.host, ac.prefix = u.Scheme, u.Host, strings.TrimSuffix(u.Path, "/")
		if u.Port() == "" {
			ac.host = net.JoinHostPort(u.Hostname(), map[string]string{"https": "443", "http": "80"}[u.Scheme])
		}
		// url.Parse takes hosts no dialer can use ("http://]"): refuse them
		// here, by name, rather than at every pod's dial.
		if h, p, err := net.SplitHostPort(ac.host); err != nil || h == "" || !validPort(p) {
			return nil, fmt.Errorf("kubeconfig %s: bad server %q", path, c.Cluster.Server)
		}
		tlsConf.ServerName = u.Hostname()
		tlsConf.InsecureSkipVerify = c.Cluster.InsecureSkipTLSVerify
		pem, err := pemData(c.Cluster.CertificateAuthorityData, c.Cluster.CertificateAuthority, read)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: CA: %w", path, err)
		}
		if pem != nil {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("kubeconfig %s: CA holds no PEM certificate", path)
			}
			tlsConf.RootCAs = pool
		}
	}
	if !found {
		return nil, fmt.Errorf("kubeconfig %s: no server for cluster %q", path, clusterName)
	}
	for _, u := range kc.Users {
		if u.Name != userName {
			continue
		}
		ac.token = u.User.Token
		if ac.token == "" && u.User.TokenFile != "" {
			t, err := read(u.User.TokenFile)
			if err != nil {
				return nil, fmt.Errorf("kubeconfig %s: token: %w", path, err)
			}
			ac.token = strings.TrimSpace(string(t))
		}
		if u.User.ClientCertificateData != "" {
			cert, err := clientCert(u.User.ClientCertificateData, u.User.ClientKeyData)
			if err != nil {
				return nil, fmt.Errorf("kubeconfig %s: client certificate: %w", path, err)
			}
			tlsConf.Certificates = []tls.Certificate{cert}
		}
	}
	ac.tls = tlsConf
	return ac, nil
}

func pemData(data, file string, read func(string) ([]byte, error)) ([]byte, error) {
	if data != "" {
		return base64.StdEncoding.DecodeString(data)
	}
	if file != "" {
		return read(file)
	}
	return nil, nil
}

func clientCert(certData, keyData string) (tls.Certificate, error) {
	c, err := base64.StdEncoding.DecodeString(certData)
	if err != nil {
		return tls.Certificate{}, err
	}
	k, err := base64.StdEncoding.DecodeString(keyData)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(c, k)
}

// getPod does one GET of the pod through the agent's kubeconfig.
func getPod(ctx context.Context, kubeconfigPath, ns, name string) (mesh.Pod, error) {
	ac, err := loadKubeconfig(kubeconfigPath)
	if err != nil {
		return mesh.Pod{}, err
	}
	h := map[string]string{}
	if ac.token != "" {
		h["Authorization"] = "Bearer " + ac.token
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", ac.host)
	if err != nil {
		return mesh.Pod{}, err
	}
	if ac.scheme == "https" {
		tc := tls.Client(conn, ac.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return mesh.Pod{}, fmt.Errorf("TLS to %s: %w", ac.host, err)
		}
		conn = tc
	}
	path := ac.prefix + "/api/v1/namespaces/" + url.PathEscape(ns) + "/pods/" + url.PathEscape(name)
	body, err := podget.GetOK(ctx, conn, ac.host, path, h)
	if err != nil {
		return mesh.Pod{}, err
	}
	var p mesh.APIPod
	if err := json.Unmarshal(body, &p); err != nil {
		return mesh.Pod{}, fmt.Errorf("decode pod: %w", err)
	}
	return p.Pod(), nil
}

// validPort: a decimal TCP port, 1 to 65535.
func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n >= 1 && n <= 65535 && strconv.Itoa(n) == p
}
