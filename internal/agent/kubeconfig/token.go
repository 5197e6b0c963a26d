package kubeconfig

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	// Node, when set, binds every token to that Node (the agent's own): the
	// token then carries the node's name (what the chart's admission policy
	// requires) and stops working when the Node is deleted. Not the agent's
	// pod: the API server binds a token only to a pod running as the token's
	// ServiceAccount, and no pod runs as the plugin's.
	Node string

	mu          sync.Mutex
	token       string
	refresh     time.Time
	nodeUnbound bool // the API server cannot bind to a Node
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
	spec := authv1.TokenRequestSpec{ExpirationSeconds: &secs}
	if r.Node != "" && !r.nodeUnbound {
		spec.BoundObjectRef = &authv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: r.Node}
	}
	tr, err := r.Client.ServiceAccounts(r.Namespace).CreateToken(ctx, r.Name, &authv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
	if spec.BoundObjectRef != nil && apierrors.IsBadRequest(err) && strings.Contains(err.Error(), "ServiceAccountTokenNodeBinding") {
		// Before Kubernetes 1.31 binding to a Node is off by default
		// (kubernetes pkg/registry/core/serviceaccount/storage/token.go,
		// "cannot bind token to a Node object as the ... feature-gate is
		// disabled"): unbound tokens then, as before 1.31.
		r.nodeUnbound = true
		spec.BoundObjectRef = nil
		tr, err = r.Client.ServiceAccounts(r.Namespace).CreateToken(ctx, r.Name, &authv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
	}
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
