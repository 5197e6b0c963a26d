// Package kubeconfig writes the kubeconfig the plugin uses for its fallback
// pod GET: JSON (valid YAML, so the plugin reads it with encoding/json),
// mode 0600, holding a token of the plugin's own ServiceAccount
// (TokenRequester, bound to the agent's Node), or without one the agent's
// projected token.
package kubeconfig

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/mesh-cni/mesh-cni/internal/agent/install"
)

// Options say where the credentials come from.
type Options struct {
	Host      string // KUBERNETES_SERVICE_HOST; an IPv6 address is bracketed
	Port      string // KUBERNETES_SERVICE_PORT
	TokenPath string
	CAPath    string // "" = no CA (the plugin then trusts the system roots)
	// Tokens, when set, gives the token to write instead of TokenPath's:
	// the agent's own token then never leaves its pod.
	Tokens interface{ Token() (string, error) }
}

// FromEnv fills Host and Port from the in-cluster environment.
func FromEnv(tokenPath, caPath string) (Options, error) {
	o := Options{
		Host:      os.Getenv("KUBERNETES_SERVICE_HOST"),
		Port:      os.Getenv("KUBERNETES_SERVICE_PORT"),
		TokenPath: tokenPath,
		CAPath:    caPath,
	}
	if o.Host == "" || o.Port == "" {
		return o, fmt.Errorf("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set (not running in a pod?)")
	}
	return o, nil
}

// Server is the API server URL, with IPv6 addresses bracketed.
func (o Options) Server() string {
	return "https://" + net.JoinHostPort(strings.Trim(o.Host, "[]"), o.Port)
}

// Config is the subset of the kubeconfig format we write.
type Config struct {
	APIVersion     string         `json:"apiVersion"`
	Kind           string         `json:"kind"`
	Clusters       []NamedCluster `json:"clusters"`
	Users          []NamedUser    `json:"users"`
	Contexts       []NamedContext `json:"contexts"`
	CurrentContext string         `json:"current-context"`
}

type NamedCluster struct {
	Name    string  `json:"name"`
	Cluster Cluster `json:"cluster"`
}

type Cluster struct {
	Server                   string `json:"server"`
	CertificateAuthorityData string `json:"certificate-authority-data,omitempty"`
}

type NamedUser struct {
	Name string `json:"name"`
	User User   `json:"user"`
}

type User struct {
	Token string `json:"token"`
}

type NamedContext struct {
	Name    string  `json:"name"`
	Context Context `json:"context"`
}

type Context struct {
	Cluster string `json:"cluster"`
	User    string `json:"user"`
}

// Build reads the token and CA and returns the kubeconfig bytes.
func Build(o Options) ([]byte, error) {
	var token string
	if o.Tokens != nil {
		t, err := o.Tokens.Token()
		if err != nil {
			return nil, err
		}
		token = t
	} else {
		tok, err := os.ReadFile(o.TokenPath)
		if err != nil {
			return nil, fmt.Errorf("service-account token: %w", err)
		}
		token = strings.TrimSpace(string(tok))
		if token == "" {
			return nil, fmt.Errorf("service-account token %s is empty", o.TokenPath)
		}
	}
	c := Cluster{Server: o.Server()}
	if o.CAPath != "" {
		ca, err := os.ReadFile(o.CAPath)
		if err != nil {
			return nil, fmt.Errorf("API server CA: %w", err)
		}
		c.CertificateAuthorityData = base64.StdEncoding.EncodeToString(ca)
	}
	cfg := Config{
		APIVersion:     "v1",
		Kind:           "Config",
		Clusters:       []NamedCluster{{Name: "local", Cluster: c}},
		Users:          []NamedUser{{Name: "mesh-cni", User: User{Token: token}}},
		Contexts:       []NamedContext{{Name: "mesh-cni", Context: Context{Cluster: "local", User: "mesh-cni"}}},
		CurrentContext: "mesh-cni",
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Write builds the kubeconfig and writes it to path (mode 0600, durable),
// unless it already has that content. It reports whether it wrote.
func Write(path string, o Options) (bool, error) {
	b, err := Build(o)
	if err != nil {
		return false, err
	}
	if cur, err := os.ReadFile(path); err == nil && string(cur) == string(b) {
		if fi, err := os.Stat(path); err == nil && fi.Mode().Perm() == 0o600 {
			return false, nil
		}
		if err := os.Chmod(path, 0o600); err != nil {
			return false, fmt.Errorf("chmod kubeconfig: %w", err)
		}
		return true, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, fmt.Errorf("create kubeconfig dir: %w", err)
	}
	if err := install.WriteFileAtomicMode(path, b, 0o600); err != nil {
		return false, fmt.Errorf("write kubeconfig: %w", err)
	}
	return true, nil
}
