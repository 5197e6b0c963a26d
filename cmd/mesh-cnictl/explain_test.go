package main

import (
	"bytes"
	"strings"
	"testing"
)

// explainData holds the manifests internal/ctl/explain's tests explain.
const explainData = "../../internal/ctl/explain/testdata/"

// Exit 0 for any decision, 1 for the input ADD would refuse, naming it;
// explain's usage errors are in TestUsage.
func TestExplainInvalidInput(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--annotation", "linkerd.io/proxy-version=x", "--annotation", "config.linkerd.io/skip-inbound-ports=80,abc", "--profile", "linkerd", "--mesh-config", `{"trustAnnotations": true}`},
			exitFailed, `annotation config.linkerd.io/skip-inbound-ports="80,abc": invalid port "abc"`},
		{[]string{"--annotation", `sidecar.istio.io/status={"containers":["istio-proxy"]}`, "--annotation", "traffic.sidecar.istio.io/includeOutboundIPRanges=10.0.0.0/33"},
			exitFailed, `includeOutboundIPRanges="10.0.0.0/33": invalid CIDR`},
		{[]string{"--profile", "cilium"}, exitFailed, `unknown mesh profile "cilium"`},
		{[]string{"--profile", "custom"}, exitFailed, "needs sidecar or selectAnnotation"},
		{[]string{"--profile", "linkerd", "--mesh-config", `{"inboundPort": "x"}`}, exitFailed, "--mesh-config"},
		{[]string{"--profile", "linkerd", "--mesh-config", `{"bogus": 1}`}, exitFailed, `unknown field "bogus"`},
		{[]string{"--config", explainData + "nope.json"}, exitFailed, "no such file"},
		{[]string{"--config", explainData + "linkerd-pod.yaml"}, exitFailed, "linkerd-pod.yaml"},
		{[]string{"--pod", explainData + "conflist.json"}, 0, "decision: skip (no-sidecar)"}, // a conflist is no pod, but parses as an empty one
		{[]string{"--family", "ipv5"}, exitFailed, `--family "ipv5"`},
	} {
		var out, errb bytes.Buffer
		code := run(append([]string{"explain"}, c.args...), &out, &errb)
		if code != c.code || !strings.Contains(out.String()+errb.String(), c.want) {
			t.Errorf("%q: exit %d, want %d with %q; stdout:\n%s\nstderr:\n%s", c.args, code, c.code, c.want, out.String(), errb.String())
		}
	}
}

func TestExplainHelp(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"explain", "-h"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "mesh-cnictl explain [NAMESPACE/]POD [flags]") {
		t.Errorf("-h: exit %d, stdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
}
