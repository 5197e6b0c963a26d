package doctest

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestSplit(t *testing.T) {
	tests := []struct {
		line     string
		pipeline [][]string
		redirect string
		err      string
	}{
		{"helm install mesh-cni charts/mesh-cni -n mesh-cni", [][]string{{"helm", "install", "mesh-cni", "charts/mesh-cni", "-n", "mesh-cni"}}, "", ""},
		{`journalctl -u containerd --since "10 min ago" | grep mesh-cni`,
			[][]string{{"journalctl", "-u", "containerd", "--since", "10 min ago"}, {"grep", "mesh-cni"}}, "", ""},
		{`kubectl get node n -o jsonpath='{.metadata.annotations.mesh-cni\.io/agent-status}'`,
			[][]string{{"kubectl", "get", "node", "n", "-o", `jsonpath={.metadata.annotations.mesh-cni\.io/agent-status}`}}, "", ""},
		{"kubectl -n shop get pod web-0 -o yaml > pod.yaml", [][]string{{"kubectl", "-n", "shop", "get", "pod", "web-0", "-o", "yaml"}}, "pod.yaml", ""},
		{`echo a\ b "x\"y"`, [][]string{{"echo", "a b", `x"y`}}, "", ""},
		{"make build && make test", nil, "", "not supported"},
		{"echo $HOME", nil, "", "not supported"},
		{`echo "$HOME"`, nil, "", "expansion"},
		{"echo 'open", nil, "", "unterminated single quote"},
		{"ls >", nil, "", "redirect without a file"},
		{"| grep x", nil, "", "empty command"},
	}
	for _, tc := range tests {
		c, err := split(tc.line)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want %q", tc.line, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.line, err)
			continue
		}
		if !reflect.DeepEqual(c.Pipeline, tc.pipeline) || c.Redirect != tc.redirect {
			t.Errorf("%s: got %q > %q, want %q > %q", tc.line, c.Pipeline, c.Redirect, tc.pipeline, tc.redirect)
		}
	}
}

func TestParse(t *testing.T) {
	md := "# T\n\n<!-- e2e: install -->\n```sh\n# a comment\nkubectl create namespace x\nhelm install a \\\n  charts/mesh-cni\ncat > v.yaml <<'EOF'\na: 1\n  b: 2\nEOF\n```\n\ntext\n\n```text\n✓ x\n```\n\n1. item\n\n   ```yaml\n   kind: Pod\n     x: 1\n   ```\n<!-- doctest: external -->\n```sh\nlinkerd check\n```\n"
	path := filepath.Join(t.TempDir(), "x.md")
	if err := os.WriteFile(path, []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	bs, err := Parse(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 4 {
		t.Fatalf("%d blocks", len(bs))
	}
	b := bs[0]
	if b.E2E() != "install" || b.Lang != "sh" || b.Line != 4 || len(b.Commands) != 3 {
		t.Fatalf("block 0: %+v", b)
	}
	if got := b.Commands[1].Pipeline[0]; !reflect.DeepEqual(got, []string{"helm", "install", "a", "charts/mesh-cni"}) || b.Commands[1].Line != 7 {
		t.Errorf("continued line: %q at %d", got, b.Commands[1].Line)
	}
	if c := b.Commands[2]; c.Redirect != "v.yaml" || c.Stdin != "a: 1\n  b: 2\n" {
		t.Errorf("here-document: %+v", c)
	}
	if bs[1].Tag != "" || bs[1].Lang != "text" || len(bs[1].Commands) != 0 {
		t.Errorf("block 1: %+v", bs[1])
	}
	if bs[2].Body != "kind: Pod\n  x: 1" {
		t.Errorf("indented block body %q", bs[2].Body)
	}
	if !bs[3].External() || bs[3].E2E() != "" {
		t.Errorf("block 3: %+v", bs[3])
	}

	bad := filepath.Join(t.TempDir(), "bad.md")
	os.WriteFile(bad, []byte("```sh\ncat > f <<EOF\nx\n```\n"), 0o644)
	if _, err := Parse(bad); err == nil || !strings.Contains(err.Error(), "never") {
		t.Errorf("unterminated here-document: %v", err)
	}
}

func TestTaggedDocs(t *testing.T) {
	// The blocks the e2e suite runs exist in the real docs.
	for _, name := range []string{"namespace", "helm-install", "kustomize-install", "helm-upgrade", "helm-uninstall"} {
		bs, err := Tagged("../../../docs", name)
		if err != nil {
			t.Fatal(err)
		}
		if len(bs[0].Commands) == 0 {
			t.Errorf("e2e block %s has no commands", name)
		}
	}
	if _, err := Tagged("../../../docs", "no-such-block"); err == nil {
		t.Error("want an error for an unknown tag")
	}
}
