package check

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestWriteText(t *testing.T) {
	tests := []struct {
		name string
		in   []Result
		want string
	}{
		{"all ok", []Result{ok("a", "fine"), ok("b", "")},
			"✓ a: fine\n✓ b\n\nall 2 checks passed\n"},
		{"failure with details and hint", []Result{fail("c", "2 bad", "fix it", "node n1: x", "node n2: y")},
			"✗ c: 2 bad\n    node n1: x\n    node n2: y\n    hint: fix it\n\n1 of 1 checks failed\n"},
		{"warning does not fail", []Result{warn("d", "odd", "look"), ok("e", "")},
			"‼ d: odd\n    hint: look\n✓ e\n\nall 2 checks passed\n"},
		{"ok hides details", []Result{{Name: "f", Status: OK, Details: []string{"x"}, Hint: "h"}},
			"✓ f\n\nall 1 checks passed\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteText(&b, Report{Checks: tc.in}); err != nil {
				t.Fatal(err)
			}
			if b.String() != tc.want {
				t.Errorf("got\n%s\nwant\n%s", b.String(), tc.want)
			}
		})
	}
}

func TestWriteJSON(t *testing.T) {
	rep := Report{Phase: "pre", Namespace: "mesh-cni", Version: "v1", OK: false,
		Checks: []Result{fail("c", "bad", "fix", "d1"), ok("a", "")}}
	var b bytes.Buffer
	if err := WriteJSON(&b, rep); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b.String())
	}
	checks := got["checks"].([]any)
	first := checks[0].(map[string]any)
	if got["ok"] != false || got["phase"] != "pre" || len(checks) != 2 ||
		first["status"] != "fail" || first["hint"] != "fix" || first["details"].([]any)[0] != "d1" {
		t.Errorf("unexpected JSON:\n%s", b.String())
	}
	if _, has := checks[1].(map[string]any)["hint"]; has {
		t.Errorf("an ok check carries no hint:\n%s", b.String())
	}

	b.Reset()
	if err := WriteJSON(&b, Report{}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b.Bytes(), []byte(`"checks": []`)) {
		t.Errorf("empty report must have an empty checks list, got\n%s", b.String())
	}
}

func TestFailed(t *testing.T) {
	if n := Failed([]Result{ok("a", ""), warn("b", "", ""), fail("c", "", "")}); n != 1 {
		t.Errorf("Failed = %d, want 1", n)
	}
}

func TestAgentStatusProblem(t *testing.T) {
	full := `"binary":"/opt/cni/bin/mesh-cni","conf":"/etc/cni/net.d/10-kindnet.conflist","kubeconfig":"/var/lib/mesh-cni/kubeconfig","backend":"nftables"`
	tests := []struct {
		ann, want string
		wantErr   bool
	}{
		{`{"ready":true,` + full + `}`, "", false},
		{`{"ready":false,"reason":"no primary CNI config in /etc/cni/net.d"}`, "not ready: no primary CNI config in /etc/cni/net.d", false},
		{`{"ready":false}`, "not ready", false},
		{`{"ready":true,"binary":"/opt/cni/bin/mesh-cni"}`, "ready but reports no chain entry, kubeconfig, backend", false},
		{`{"ready":tru`, "", true},
		{`[]`, "", true},
	}
	for _, tc := range tests {
		st, err := agentStatus(nodeWith(tc.ann))
		if tc.wantErr {
			if err == nil {
				t.Errorf("%s: want an error", tc.ann)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.ann, err)
		}
		if got := st.problem(); got != tc.want {
			t.Errorf("%s: problem = %q, want %q", tc.ann, got, tc.want)
		}
	}
	if st, err := agentStatus(nodeWith("")); st != nil || err != nil {
		t.Errorf("node without annotation: got %v, %v", st, err)
	}
}
