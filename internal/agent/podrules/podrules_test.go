package podrules

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/mesh-cni/mesh-cni/internal/backend/finding"
	"github.com/mesh-cni/mesh-cni/internal/backend/nftables"
	"github.com/mesh-cni/mesh-cni/internal/config"
	"github.com/mesh-cni/mesh-cni/internal/ctl/explain"
	"github.com/mesh-cni/mesh-cni/internal/rules"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

const podUID = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"

// linkerdPod is the explain testdata's Linkerd pod on node with ip.
func linkerdPod(t *testing.T, node, ip string) *corev1.Pod {
	t.Helper()
	b, err := os.ReadFile("../../ctl/explain/testdata/linkerd-pod.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(b, &pod); err != nil {
		t.Fatal(err)
	}
	pod.UID, pod.Spec.NodeName = podUID, node
	pod.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	return &pod
}

// serve runs the real handler for pod over HTTP and returns a GET.
func serve(t *testing.T, dir string, pod *corev1.Pod, entry []byte) func(q url.Values) (int, string) {
	t.Helper()
	h := NewHandler(Handler{Node: "node-a", NetnsDir: dir, Entry: func(context.Context) ([]byte, error) { return entry, nil },
		Pod: func(_ context.Context, ns, name string) (*corev1.Pod, error) {
			if ns == pod.Namespace && name == pod.Name {
				return pod, nil
			}
			return nil, nil
		}})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return func(q url.Values) (int, string) {
		resp, err := http.Get(srv.URL + finding.Path + "?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
}

func report(t *testing.T, get func(url.Values) (int, string), q url.Values) finding.Report {
	t.Helper()
	code, body := get(q)
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	var r finding.Report
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return r
}

// The rules ADD writes (the real nftables backend, into a real netns found
// among others by the pod's IP) are reported present; with one rule
// deleted behind its back, that rule is reported missing, and a rule of
// ours that is not expected, extra.
func TestReportNftables(t *testing.T) {
	dir := t.TempDir()
	testenv.RuntimeNS(t, dir, "cni-decoy", "10.244.1.9/24")
	n := testenv.RuntimeNS(t, dir, "cni-pod", "10.244.1.7/24")
	if err := os.WriteFile(filepath.Join(dir, "not-a-netns"), nil, 0o444); err != nil {
		t.Fatal(err)
	}
	entry, err := config.Load([]byte(`{"type":"mesh-cni","backend":"nftables"}`), config.HostPaths{Kubeconfig: "/etc/cni/net.d/mesh-cni-kubeconfig"})
	if err != nil {
		t.Fatal(err)
	}
	pod := linkerdPod(t, "node-a", "10.244.1.7")
	get := serve(t, dir, pod, entry)
	q := url.Values{"namespace": {pod.Namespace}, "name": {pod.Name}, "uid": {podUID}}

	// Before ADD: every expected rule is missing.
	r := report(t, get, q)
	if r.Decision != "redirect" || r.Netns != filepath.Join(dir, "cni-pod") || r.Backend != "nftables" {
		t.Fatalf("report: %+v", r)
	}
	if finding.Count(r.Findings, finding.Missing) == 0 || finding.Count(r.Findings, finding.Present) != 0 {
		t.Errorf("before ADD: %+v", r.Findings)
	}

	// ADD's rules, as explain renders them, applied with the real backend.
	o := explain.NewOptions()
	o.PodManifest, _ = json.Marshal(pod)
	o.Entry = entry
	_, rs, err := explain.Rules(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := nftables.New().Apply(n.Path(), rs); err != nil {
		t.Fatal(err)
	}
	r = report(t, get, q)
	present := finding.Count(r.Findings, finding.Present)
	if present < 5 || finding.Count(r.Findings, finding.Missing) != 0 || finding.Count(r.Findings, finding.Extra) != 0 {
		t.Fatalf("after ADD: %+v", r.Findings)
	}
	for _, f := range r.Findings {
		if f.Family != "inet" || f.Table != rules.NftTable || f.Rule == "" {
			t.Errorf("finding %+v", f)
		}
	}
	if !strings.Contains(body(r), "redirect to :4140") {
		t.Errorf("the outbound redirect is not among the findings: %+v", r.Findings)
	}

	// Sabotage: delete the outbound redirect rule.
	deleteRule(t, n, "redirect to :4140", rs)
	r = report(t, get, q)
	var missing []finding.Finding
	for _, f := range r.Findings {
		if f.State == finding.Missing {
			missing = append(missing, f)
		}
	}
	if len(missing) != 1 || !strings.Contains(missing[0].Rule, "redirect to :4140") || finding.Count(r.Findings, finding.Present) != present-1 {
		t.Errorf("after deleting the redirect: missing %+v", missing)
	}

	// A rule set for another pod (other ports): the netns's rules are extra.
	pod.Annotations["config.linkerd.io/proxy-outbound-port"] = "4999"
	pod.Annotations["config.linkerd.io/skip-outbound-ports"] = ""
	r = report(t, get, q)
	if finding.Count(r.Findings, finding.Extra) == 0 || finding.Count(r.Findings, finding.Missing) == 0 {
		t.Errorf("changed ports: %+v", r.Findings)
	}
}

func body(r finding.Report) string {
	var b strings.Builder
	for _, f := range r.Findings {
		b.WriteString(f.State + " " + f.Rule + "\n")
	}
	return b.String()
}

// deleteRule removes, behind the backend's back, the one kernel rule whose
// rendered text contains what.
func deleteRule(t *testing.T, n ns.NetNS, what string, rs rules.RuleSet) {
	t.Helper()
	chain := ""
	index := -1
	for _, tb := range rs.Tables {
		for _, ch := range tb.Chains {
			k := 0
			for _, r := range ch.Rules {
				for _, line := range rules.NftRule(r, rs.Families) {
					if strings.Contains(line, what) {
						chain, index = ch.Name, k
					}
					k++
				}
			}
		}
	}
	if index < 0 {
		t.Fatalf("no rule renders %q", what)
	}
	testenv.DeleteNftRule(t, n, rules.NftTable, chain, index)
}

// Bad input is refused before anything is read; a wrong UID is answered
// as an unknown pod.
func TestRefused(t *testing.T) {
	pod := linkerdPod(t, "node-a", "10.244.1.7")
	get := serve(t, t.TempDir(), pod, []byte(`{"type":"mesh-cni"}`))
	for _, c := range []struct {
		q    url.Values
		code int
		want string
	}{
		{url.Values{"namespace": {"Bad_NS"}, "name": {pod.Name}, "uid": {podUID}}, 400, "namespace"},
		{url.Values{"namespace": {pod.Namespace}, "name": {strings.Repeat("a", 300)}, "uid": {podUID}}, 400, "name"},
		{url.Values{"namespace": {pod.Namespace}, "name": {pod.Name}}, 400, "uid"},
		{url.Values{"namespace": {pod.Namespace}, "name": {pod.Name}, "uid": {"../../../etc"}}, 400, "uid"},
		{url.Values{"namespace": {pod.Namespace}, "name": {pod.Name}, "uid": {"0a1b2c3d-0000-4a6b-8c7d-9e0f1a2b3c4d"}}, 404, "no pod"},
		{url.Values{"namespace": {pod.Namespace}, "name": {"other"}, "uid": {podUID}}, 404, "no pod"},
		{url.Values{"namespace": {pod.Namespace}, "name": {pod.Name}, "uid": {podUID}}, 404, "no network namespace holds"},
	} {
		code, b := get(c.q)
		if code != c.code || !strings.Contains(b, c.want) {
			t.Errorf("%v: %d %q, want %d with %q", c.q, code, b, c.code, c.want)
		}
	}
}
