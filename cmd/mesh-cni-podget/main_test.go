package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/lookup/podget"
)

func TestRun(t *testing.T) {
	call := func(args ...string) (int, string, string) {
		var out, errs bytes.Buffer
		code := run(args, &out, &errs)
		return code, out.String(), errs.String()
	}
	if code, out, _ := call("version"); code != 0 || !strings.HasPrefix(out, "mesh-cni-podget ") {
		t.Errorf("version: %d %q", code, out)
	}
	for _, args := range [][]string{
		nil,
		{"--kubeconfig", "/kc", "--namespace", "shop", "--name", "web-1"}, // no timeout
		{"--kubeconfig", "/kc", "--namespace", "shop", "--timeout", "1s"}, // no name
		{"--bogus"},
		{"--kubeconfig", "/kc", "--namespace", "shop", "--name", "web-1", "--timeout", "1s", "extra"},
	} {
		if code, out, errs := call(args...); code != 2 || out != "" || !strings.Contains(errs, "usage: mesh-cni-podget") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out, errs)
		}
	}
	// A failed GET is a Result, exit 0.
	kc := filepath.Join(t.TempDir(), "none")
	code, out, errs := call("--kubeconfig", kc, "--namespace", "shop", "--name", "web-1", "--timeout", "1s")
	var res podget.Result
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Pod != nil || !strings.HasPrefix(res.Error, "kubeconfig: open "+kc) {
		t.Errorf("missing kubeconfig: exit %d, %q %q", code, out, errs)
	}
}
