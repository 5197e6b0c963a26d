package main

import (
	"bytes"
	"strings"
	"testing"
)

// The API path (token, RBAC, DaemonSet status) is TestHelmTestPod's, in
// charts/chart; here the command line.
func TestAgentsReadyUsage(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"--no-such-flag"}, 2, "flag provided but not defined"},
		{[]string{"--namespace=ns", "extra"}, 2, `unexpected argument "extra"`},
		{nil, 2, "--namespace is empty"},
		{[]string{"--namespace=ns"}, 1, "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set"},
	} {
		var out, errb bytes.Buffer
		if code := agentsReady(tc.args, &out, &errb); code != tc.code || !strings.Contains(errb.String(), tc.says) {
			t.Errorf("agents-ready %v: exit %d, stderr %q; want %d saying %q", tc.args, code, errb.String(), tc.code, tc.says)
		}
	}
}
