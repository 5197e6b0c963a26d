package podget

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// helper writes a stand-in for mesh-cni-podget: a shell script.
func helper(t *testing.T, script string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), Binary)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func run(t *testing.T, bin string, timeout time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	pod, err := Run(ctx, bin, "/kc", "shop", "web-1", "u-1")
	if err == nil && (pod.Namespace != "shop" || pod.Name != "web-1" || !pod.SpecKnown) {
		t.Errorf("pod: %+v", pod)
	}
	return err
}

func TestRun(t *testing.T) {
	// The command line the helper gets: the pod, the kubeconfig, and a
	// budget a little under what is left.
	args := filepath.Join(t.TempDir(), "args")
	ok := helper(t, `echo "$@" > `+args+`
echo '{"pod":{"namespace":"shop","name":"web-1","uid":"u-1","specKnown":true}}'`)
	if err := run(t, ok, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(args)
	f := strings.Fields(string(b))
	if len(f) != 8 || strings.Join(f[:7], " ") != "--kubeconfig /kc --namespace shop --name web-1 --timeout" {
		t.Fatalf("args: %q", b)
	}
	if d, err := time.ParseDuration(f[7]); err != nil || d < time.Second || d > 1950*time.Millisecond {
		t.Errorf("timeout %q for a 2s budget", f[7])
	}

	for _, tc := range []struct {
		name, script string
		want         string
	}{
		{"not found", `echo '{"notFound":true}'`, "pod not found"},
		{"error", `echo '{"error":"TLS to 10.96.0.1:443: x509: certificate signed by unknown authority"}'`, "TLS to 10.96.0.1:443: x509"},
		{"other pod", `echo '{"pod":{"namespace":"shop","name":"web-2"}}'`, "answered for pod shop/web-2, asked for shop/web-1"},
		// The API holds another pod of that name than the runtime's.
		{"other UID", `echo '{"pod":{"namespace":"shop","name":"web-1","uid":"u-0"}}'`, "another UID: pod shop/web-1 is u-0, the runtime's is u-1"},
		{"no UID", `echo '{"pod":{"namespace":"shop","name":"web-1"}}'`, "carries no UID"},
		{"empty answer", `echo '{}'`, "neither a pod nor an error"},
		{"garbage", `echo 'segfault'`, "undecodable answer"},
		{"usage", `echo 'usage: ...' >&2; exit 2`, Binary + ": exit status 2: usage: ..."},
		{"too large", `head -c 5000000 /dev/zero`, "answer larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run(t, helper(t, tc.script), 2*time.Second)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
			if tc.name == "other UID" && !errors.Is(err, ErrOtherUID) {
				t.Errorf("other UID: %v is not ErrOtherUID", err)
			}
			if tc.name == "not found" && !errors.Is(err, ErrNotFound) {
				t.Errorf("not found: %v is not ErrNotFound", err)
			}
		})
	}
}

// A helper that hangs is stopped at the deadline, and says so.
func TestRunDeadline(t *testing.T) {
	start := time.Now()
	err := run(t, helper(t, "exec sleep 60"), 300*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "stopped at the deadline") {
		t.Errorf("got %v, want the deadline", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v", d)
	}
}

// No helper beside the plugin: an error naming where it should be.
func TestRunMissing(t *testing.T) {
	bin := filepath.Join(t.TempDir(), Binary)
	err := run(t, bin, time.Second)
	if err == nil || !strings.Contains(err.Error(), bin+" is missing") {
		t.Errorf("got %v", err)
	}
}
