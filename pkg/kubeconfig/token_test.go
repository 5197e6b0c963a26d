package kubeconfig

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mesh-cni/mesh-cni/pkg/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The kubeconfig holds a token of the named ServiceAccount from the real
// API server, kept until 80% of its lifetime and then replaced.
func TestTokenRequesterRotates(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t, "kc")
	now := time.Now()
	r := &TokenRequester{Client: env.Client.CoreV1(), Namespace: ns, Name: "default", TTL: time.Hour, Now: func() time.Time { return now }}
	out := filepath.Join(t.TempDir(), "kubeconfig")
	o := Options{Host: "10.96.0.1", Port: "443", Tokens: r}

	written := func() string {
		t.Helper()
		if _, err := Write(out, o); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		var c Config
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatal(err)
		}
		return c.Users[0].User.Token
	}
	whoami := func(tok string) string {
		t.Helper()
		rev, err := env.Client.AuthenticationV1().TokenReviews().Create(context.Background(), &authv1.TokenReview{Spec: authv1.TokenReviewSpec{Token: tok}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !rev.Status.Authenticated {
			t.Fatalf("written token not valid: %s", rev.Status.Error)
		}
		return rev.Status.User.Username
	}

	first := written()
	if u := whoami(first); u != "system:serviceaccount:"+ns+":default" {
		t.Fatalf("token authenticates as %s", u)
	}
	now = now.Add(40 * time.Minute)
	if again := written(); again != first {
		t.Fatal("token replaced before 80% of its lifetime")
	}
	now = now.Add(10 * time.Minute)
	second := written()
	if second == first {
		t.Fatal("token not replaced after 80% of its lifetime")
	}
	whoami(second)
}

// A failed request names the account and writes nothing.
func TestTokenRequesterError(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t, "kc")
	r := &TokenRequester{Client: env.Client.CoreV1(), Namespace: ns, Name: "missing"}
	out := filepath.Join(t.TempDir(), "kubeconfig")
	_, err := Write(out, Options{Host: "10.96.0.1", Port: "443", Tokens: r})
	if err == nil || !strings.Contains(err.Error(), ns+"/missing") {
		t.Fatalf("want an error naming %s/missing, got %v", ns, err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("kubeconfig written after a failed token request: %v", err)
	}
}
