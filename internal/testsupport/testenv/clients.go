package testenv

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Namespace creates a namespace named after prefix (with a random suffix)
// holding the "default" service account, which the ServiceAccount admission
// plugin requires before any pod can be created. There is no namespace
// controller, so the namespace is not deleted afterwards; it goes away with
// the control plane.
func (e *Env) Namespace(t testing.TB, prefix string) string {
	t.Helper()
	ctx := context.Background()
	ns, err := e.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	if err := e.ensureServiceAccount(ctx, ns.Name, "default"); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// Node creates a Node object (no kubelet behind it) and deletes it when the
// test ends. Pods can be bound to it with spec.nodeName.
func (e *Env) Node(t testing.TB, name string, taints ...corev1.Taint) *corev1.Node {
	t.Helper()
	ctx := context.Background()
	n, err := e.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.NodeSpec{Taints: taints},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create node %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = e.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return n
}

func (e *Env) ensureServiceAccount(ctx context.Context, ns, name string) error {
	_, err := e.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: name},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create service account %s/%s: %w", ns, name, err)
	}
	return nil
}

// Token issues a token for the service account through the TokenRequest API
// (the same kind of token a projected volume holds), creating the account
// when it does not exist. Expiry below 10 minutes is raised to 10 minutes by
// the API server.
func (e *Env) Token(ctx context.Context, ns, name string, expiry time.Duration) (string, error) {
	if err := e.ensureServiceAccount(ctx, ns, name); err != nil {
		return "", err
	}
	secs := int64(expiry / time.Second)
	tr, err := e.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{ExpirationSeconds: &secs},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token request for %s/%s: %w", ns, name, err)
	}
	return tr.Status.Token, nil
}

// TokenConfig is a rest.Config that authenticates with token.
func (e *Env) TokenConfig(token string) *rest.Config {
	return &rest.Config{
		Host:            e.Host,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: e.CAData},
		QPS:             100,
		Burst:           200,
		Timeout:         Scale(30 * time.Second),
	}
}

// ServiceAccountClient returns a client that authenticates as service
// account ns/name with a TokenRequest token, so it has exactly the
// permissions bound to that account (none until a test binds some).
func (e *Env) ServiceAccountClient(t testing.TB, ns, name string) (*rest.Config, kubernetes.Interface) {
	t.Helper()
	tok, err := e.Token(context.Background(), ns, name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.TokenConfig(tok)
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, c
}

// BindClusterRole creates a ClusterRole with rules and binds it to service
// account ns/sa; both are removed when the test ends.
func (e *Env) BindClusterRole(t testing.TB, ns, sa string, rules []rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	role, err := e.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "testenv-"},
		Rules:      rules,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create cluster role: %v", err)
	}
	b, err := e.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create cluster role binding: %v", err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = e.Client.RbacV1().ClusterRoleBindings().Delete(ctx, b.Name, metav1.DeleteOptions{})
		_ = e.Client.RbacV1().ClusterRoles().Delete(ctx, role.Name, metav1.DeleteOptions{})
	})
	e.waitAuthorized(t, "system:serviceaccount:"+ns+":"+sa, rules)
}

// waitAuthorized waits until the API server's authorizer grants user the
// first verb of each rule: RBAC reads roles and bindings from a cache, so a
// request made right after the binding is created can still be refused
// (seen under load).
func (e *Env) waitAuthorized(t testing.TB, user string, rules []rbacv1.PolicyRule) {
	t.Helper()
	for _, r := range rules {
		if len(r.Verbs) == 0 {
			continue
		}
		spec := authzv1.SubjectAccessReviewSpec{User: user}
		switch {
		case len(r.NonResourceURLs) > 0:
			spec.NonResourceAttributes = &authzv1.NonResourceAttributes{Path: r.NonResourceURLs[0], Verb: r.Verbs[0]}
		case len(r.Resources) > 0:
			group := ""
			if len(r.APIGroups) > 0 && r.APIGroups[0] != "*" {
				group = r.APIGroups[0]
			}
			res, sub, _ := strings.Cut(r.Resources[0], "/")
			name := ""
			if len(r.ResourceNames) > 0 {
				name = r.ResourceNames[0]
			}
			spec.ResourceAttributes = &authzv1.ResourceAttributes{Group: group, Resource: res, Subresource: sub, Name: name, Verb: r.Verbs[0]}
		default:
			continue
		}
		Eventually(t, fmt.Sprintf("%s may %s", user, r.Verbs[0]), func() error {
			sar, err := e.Client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(),
				&authzv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			if !sar.Status.Allowed {
				return fmt.Errorf("not allowed yet: %s", sar.Status.Reason)
			}
			return nil
		})
	}
}

// PodClient returns a client for service account ns/sa with a token bound
// to a pod of that account on node, as the kubelet's projected token is: the
// API server puts the node's name in the token
// (authentication.kubernetes.io/node-name in the user's extra), which is
// what admission policies match a node agent on. The node must exist
// (Node); the pod (no kubelet runs it) is created and removed at the end.
func (e *Env) PodClient(t testing.TB, ns, sa, pod, node string) (*rest.Config, kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	if err := e.ensureServiceAccount(ctx, ns, sa); err != nil {
		t.Fatal(err)
	}
	p, err := e.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pod},
		Spec: corev1.PodSpec{
			NodeName: node, ServiceAccountName: sa,
			Containers: []corev1.Container{{Name: "agent", Image: "agent:1"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", ns, pod, err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = e.Client.CoreV1().Pods(ns).Delete(context.Background(), pod, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	secs := int64(3600)
	tr, err := e.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{
			ExpirationSeconds: &secs,
			BoundObjectRef:    &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token request for %s/%s bound to pod %s: %v", ns, sa, pod, err)
	}
	cfg := e.TokenConfig(tr.Status.Token)
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, c
}
