package kubeconfig

import (
	"context"
	"fmt"
	"sync"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// DefaultTokenTTL is the lifetime asked for the plugin's tokens.
const DefaultTokenTTL = time.Hour

// TokenRequester issues tokens of the plugin's own ServiceAccount (only
// `get pods`) through the TokenRequest API, so the kubeconfig on the host
// never holds the agent's token. A token is reused until 80% of its lifetime
// has passed, the point where the kubelet refreshes projected tokens
// (kubernetes pkg/kubelet/token/token_manager.go, requiresRefresh).
type TokenRequester struct {
	Client    corev1client.ServiceAccountsGetter
	Namespace string
	Name      string
	TTL       time.Duration    // default DefaultTokenTTL; the API server's minimum is 10m
	Now       func() time.Time // default time.Now
	Timeout   time.Duration    // per request; default 10s

	mu      sync.Mutex
	token   string
	refresh time.Time
}

// Token returns a valid token, requesting a new one when due.
func (r *TokenRequester) Token() (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	issued := now()
	if r.token != "" && issued.Before(r.refresh) {
		return r.token, nil
	}
	ttl, timeout := r.TTL, r.Timeout
	if ttl == 0 {
		ttl = DefaultTokenTTL
	}
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	secs := int64(ttl / time.Second)
	tr, err := r.Client.ServiceAccounts(r.Namespace).CreateToken(ctx, r.Name, &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{ExpirationSeconds: &secs},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token request for service account %s/%s: %w", r.Namespace, r.Name, err)
	}
	if tr.Status.Token == "" {
		return "", fmt.Errorf("token request for service account %s/%s: empty token", r.Namespace, r.Name)
	}
	life := tr.Status.ExpirationTimestamp.Sub(issued)
	if life <= 0 {
		life = ttl
	}
	r.token, r.refresh = tr.Status.Token, issued.Add(life*4/5)
	return r.token, nil
}
