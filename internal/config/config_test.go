package config

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/mesh-cni/mesh-cni/internal/mesh"
	"github.com/mesh-cni/mesh-cni/internal/node"
)

func TestParseDefaults(t *testing.T) {
	c, err := Parse([]byte(`{"cniVersion":"1.0.0","name":"k8s","type":"mesh-cni"}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Backend != "auto" || c.LogLevel != "info" || !*c.IPv6 || c.Timeout != 5*time.Second {
		t.Errorf("defaults: backend %q logLevel %q ipv6 %v timeout %v", c.Backend, c.LogLevel, *c.IPv6, c.Timeout)
	}
	if strings.Join(c.ExcludeNamespaces, ",") != "kube-system" {
		t.Errorf("excludeNamespaces = %v", c.ExcludeNamespaces)
	}
	if c.AgentSocket != node.DefaultAgentSocket || c.ReadyMarker != node.DefaultReadyMarker ||
		c.Kubeconfig != node.DefaultKubeconfig || c.ReportSocket != node.DefaultReportSocket {
		t.Errorf("paths: %q %q %q %q", c.AgentSocket, c.ReadyMarker, c.Kubeconfig, c.ReportSocket)
	}
	if cm := c.Meshes["custom"]; len(c.Meshes) != len(mesh.Profiles) || (cm.Enabled != nil && *cm.Enabled) {
		t.Errorf("meshes = %+v", c.Meshes)
	}
	if c.Result != nil || c.RuntimeConfig.PodAnnotations != nil {
		t.Errorf("no prevResult and no annotations expected, got %v %v", c.Result, c.RuntimeConfig.PodAnnotations)
	}
}

func TestParseFull(t *testing.T) {
	in := `{
	  "cniVersion": "0.3.1", "name": "kindnet", "type": "mesh-cni",
	  "capabilities": {"io.kubernetes.cri.pod-annotations": true},
	  "logLevel": "DEBUG", "backend": "iptables-legacy", "ipv6": false,
	  "excludeNamespaces": [], "agentNamespace": "mesh", "agentPodPrefix": "agent-",
	  "lookupTimeout": "750ms", "kubeconfig": "/k", "agentSocket": "/a.sock",
	  "reportSocket": "/r.sock", "readyMarker": "/ready",
	  "meshes": {"linkerd": {"proxyUID": 2102, "ignoreInboundPorts": ["4190", "4000-4100"]},
	             "custom": {"sidecar": "envoy", "proxyUID": 101, "inboundPort": 15006, "outboundPort": 15001}},
	  "runtimeConfig": {"io.kubernetes.cri.pod-annotations": {"linkerd.io/inject": "enabled"}},
	  "prevResult": {"cniVersion": "0.3.1", "interfaces": [{"name": "eth0", "sandbox": "/run/netns/x"}],
	                 "ips": [{"version": "4", "address": "198.18.0.5/24", "interface": 0}]}
	}`
	c, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if c.LogLevel != "debug" || c.Backend != "iptables-legacy" || *c.IPv6 || c.Timeout != 750*time.Millisecond {
		t.Errorf("got logLevel %q backend %q ipv6 %v timeout %v", c.LogLevel, c.Backend, *c.IPv6, c.Timeout)
	}
	if c.ExcludeNamespaces == nil || len(c.ExcludeNamespaces) != 0 {
		t.Errorf("explicit empty excludeNamespaces must stay empty, got %v", c.ExcludeNamespaces)
	}
	if c.Result == nil || len(c.Result.IPs) != 1 || c.Result.IPs[0].Address.String() != "198.18.0.5/24" {
		t.Fatalf("prevResult not parsed: %+v", c.Result)
	}
	if c.RuntimeConfig.PodAnnotations["linkerd.io/inject"] != "enabled" {
		t.Errorf("annotations = %v", c.RuntimeConfig.PodAnnotations)
	}
	if cm := c.Meshes["custom"]; cm.Enabled == nil || !*cm.Enabled || cm.Sidecar != "envoy" {
		t.Errorf("custom given without enabled must be on: %+v", cm)
	}
	if lm := c.Meshes["linkerd"]; *lm.ProxyUID != 2102 || len(lm.IgnoreInbound) != 2 {
		t.Errorf("linkerd = %+v", lm)
	}
	if _, ok := c.Meshes["istio"]; !ok {
		t.Error("istio left out must keep its defaults")
	}
}

func TestParseErrors(t *testing.T) {
	base := `"cniVersion":"1.0.0","name":"n","type":"mesh-cni"`
	for _, tc := range []struct {
		name, in string
		code     uint
		msg      string
	}{
		{"malformed JSON", `{"name":`, types.ErrDecodingFailure, "failed to decode"},
		{"wrong type", `{` + base + `,"ipv6":"yes"}`, types.ErrDecodingFailure, "failed to decode"},
		{"bad prevResult", `{` + base + `,"prevResult":{"ips":[{"address":"nope"}]}}`, types.ErrDecodingFailure, "prevResult"},
		{"unknown profile", `{` + base + `,"meshes":{"cilium":{}}}`, types.ErrUnsupportedField, `unknown mesh profile "cilium"`},
		{"unknown mesh key", `{` + base + `,"meshes":{"istio":{"proxyUser":1}}}`, types.ErrUnsupportedField, `meshes.istio: unsupported key "proxyUser"`},
		{"bad backend", `{` + base + `,"backend":"ebpf"}`, types.ErrInvalidNetworkConfig, `invalid backend "ebpf"`},
		{"bad logLevel", `{` + base + `,"logLevel":"loud"}`, types.ErrInvalidNetworkConfig, `invalid logLevel "loud"`},
		{"bad timeout", `{` + base + `,"lookupTimeout":"5"}`, types.ErrInvalidNetworkConfig, `invalid lookupTimeout "5"`},
		{"zero timeout", `{` + base + `,"lookupTimeout":"0s"}`, types.ErrInvalidNetworkConfig, `invalid lookupTimeout "0s"`},
		{"huge timeout", `{` + base + `,"lookupTimeout":"1h"}`, types.ErrInvalidNetworkConfig, `invalid lookupTimeout "1h"`},
		{"relative path", `{` + base + `,"agentSocket":"agent.sock"}`, types.ErrInvalidNetworkConfig, `invalid agentSocket "agent.sock"`},
		{"bad namespace", `{` + base + `,"excludeNamespaces":["Kube_System"]}`, types.ErrInvalidNetworkConfig, `invalid excludeNamespaces "Kube_System"`},
		{"port out of range", `{` + base + `,"meshes":{"linkerd":{"inboundPort":70000}}}`, types.ErrInvalidNetworkConfig, `meshes.linkerd.inboundPort: 70000 is not a port`},
		{"bad port string", `{` + base + `,"meshes":{"linkerd":{"ignoreInboundPorts":["41a0"]}}}`, types.ErrInvalidNetworkConfig, `meshes.linkerd.ignoreInboundPorts: invalid port "41a0"`},
		{"reversed range", `{` + base + `,"meshes":{"istio":{"ignoreOutboundPorts":["90-80"]}}}`, types.ErrInvalidNetworkConfig, `meshes.istio.ignoreOutboundPorts: invalid port range "90-80"`},
		{"port zero", `{` + base + `,"meshes":{"istio":{"includeOutboundPorts":["0"]}}}`, types.ErrInvalidNetworkConfig, `meshes.istio.includeOutboundPorts: invalid port "0"`},
		{"bad CIDR", `{` + base + `,"meshes":{"linkerd":{"skipSubnets":["10.0.0.0/33"]}}}`, types.ErrInvalidNetworkConfig, `meshes.linkerd.skipSubnets: invalid CIDR "10.0.0.0/33"`},
		{"bad v6 CIDR", `{` + base + `,"meshes":{"istio":{"includeSubnets":["fd00::/129"]}}}`, types.ErrInvalidNetworkConfig, `meshes.istio.includeSubnets: invalid CIDR "fd00::/129"`},
		{"bad mode", `{` + base + `,"meshes":{"istio":{"interceptionMode":"TPROXYY"}}}`, types.ErrInvalidNetworkConfig, `meshes.istio.interceptionMode: "TPROXYY" is not REDIRECT or TPROXY`},
		{"negative uid", `{` + base + `,"meshes":{"istio":{"proxyUID":-1}}}`, types.ErrInvalidNetworkConfig, `meshes.istio.proxyUID: -1 is not a user or group ID`},
		{"custom without selector", `{` + base + `,"meshes":{"custom":{"proxyUID":1,"inboundPort":1,"outboundPort":2}}}`, types.ErrInvalidNetworkConfig, "meshes.custom.sidecar: the custom profile needs sidecar or selectAnnotation"},
		{"custom without ports", `{` + base + `,"meshes":{"custom":{"enabled":true,"sidecar":"envoy"}}}`, types.ErrInvalidNetworkConfig, "meshes.custom.inboundPort: 0 is not a port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			var e *types.Error
			if !errors.As(err, &e) {
				t.Fatalf("want *types.Error, got %T %v", err, err)
			}
			if e.Code != tc.code || !strings.Contains(e.Error(), tc.msg) {
				t.Errorf("got code %d %q, want code %d containing %q", e.Code, e.Error(), tc.code, tc.msg)
			}
		})
	}
}

func TestParseArgs(t *testing.T) {
	a, err := ParseArgs("IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_INFRA_CONTAINER_ID=c;K8S_POD_UID=u;OTHER=x")
	if err != nil {
		t.Fatal(err)
	}
	if a.K8S_POD_NAMESPACE != "ns" || a.K8S_POD_NAME != "p" || a.K8S_POD_INFRA_CONTAINER_ID != "c" || a.K8S_POD_UID != "u" {
		t.Errorf("got %+v", a)
	}
	for _, bad := range []string{"K8S_POD_NAME", "OTHER=x"} {
		_, err := ParseArgs(bad)
		var e *types.Error
		if !errors.As(err, &e) || e.Code != types.ErrInvalidEnvironmentVariables {
			t.Errorf("ParseArgs(%q) = %v, want code 4", bad, err)
		}
	}
}

// FuzzParse: no input may panic, and every rejection is a CNI error.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"cniVersion":"1.0.0","name":"n","type":"mesh-cni","meshes":{"linkerd":{"ignoreInboundPorts":["4190-4191"]}}}`))
	f.Add([]byte(`{"cniVersion":"0.3.1","name":"n","prevResult":{"ips":[{"address":"fd00::1/64"}]},"lookupTimeout":"1s"}`))
	f.Add([]byte(`{"meshes":{"custom":{"enabled":true,"sidecar":"x","proxyUID":1,"inboundPort":1,"outboundPort":2,"skipSubnets":["::/0"]}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err != nil {
			var e *types.Error
			if !errors.As(err, &e) || e.Code == 0 {
				t.Fatalf("rejection is not a CNI error: %T %v", err, err)
			}
			return
		}
		if c.Timeout <= 0 || c.Timeout > MaxLookupTimeout || c.IPv6 == nil || len(c.Meshes) != len(mesh.Profiles) {
			t.Fatalf("accepted config without sane defaults: %+v", c)
		}
	})
}

// TestParseScoped: an invalid entry still yields what decides exemption,
// and Parse still refuses it.
func TestParseScoped(t *testing.T) {
	for _, tc := range []struct {
		in      string
		exempts []string // namespace/name
	}{
		{`{"meshes":{"istio":{"proxyUID":-5}}}`, []string{"kube-system/a", "mesh-cni/mesh-cni-x"}},
		{`{"excludeNamespaces":["team-a","Bad"],"agentNamespace":"ops"}`, []string{"team-a/a", "ops/mesh-cni-x"}},
		{`{"excludeNamespaces":"team-a"}`, []string{"kube-system/a", "mesh-cni/mesh-cni-x"}},
		{`{"ipv6":"yes","excludeNamespaces":[]}`, nil},
	} {
		conf, err := ParseScoped([]byte(tc.in))
		if err == nil || conf == nil {
			t.Errorf("%s: conf %v, err %v; want both", tc.in, conf, err)
			continue
		}
		if c, err := Parse([]byte(tc.in)); c != nil || err == nil {
			t.Errorf("%s: Parse accepted it", tc.in)
		}
		for _, id := range append(tc.exempts, "shop/web-1") {
			ns, name, _ := strings.Cut(id, "/")
			if got, want := conf.Exempt(ns, name) != "", id != "shop/web-1"; got != want {
				t.Errorf("%s: Exempt(%s) = %v, want %v", tc.in, id, got, want)
			}
		}
	}
	if conf, err := ParseScoped([]byte(`{"prevResult":"x"`)); conf != nil || err == nil {
		t.Errorf("broken JSON: conf %v, err %v; want only an error", conf, err)
	}
}

func TestClip(t *testing.T) {
	if got := Clip("short"); got != "short" {
		t.Errorf("Clip(short) = %q", got)
	}
	got := Clip(strings.Repeat("é", 300)) // 600 bytes, 2 per rune
	if !strings.HasPrefix(got, strings.Repeat("é", MaxEcho/2)+"...[") || !strings.HasSuffix(got, "344 bytes cut]") {
		t.Errorf("Clip = %q", got)
	}
}

// The chart's port pattern and the agent's port bound are one rule.
func TestPortPatternIsThePortBound(t *testing.T) {
	re := regexp.MustCompile("^" + portRE + "$")
	for n := 0; n <= mesh.MaxPort+1000; n++ {
		if got, want := re.MatchString(strconv.Itoa(n)), n >= 1 && n <= mesh.MaxPort; got != want {
			t.Fatalf("port pattern matches %d: %v, want %v", n, got, want)
		}
	}
	for _, s := range []string{"01", "080", "+80", " 80", "080-90"} {
		if re.MatchString(s) {
			t.Errorf("port pattern matches %q", s)
		}
	}
}

// The chart's interface-name pattern and the agent's rule agree on every
// character and on the length bound. Blanks around a name and commas are
// the list's syntax (the agent joins and splits the list), not the rule.
func TestInterfacePatternIsTheAgentsRule(t *testing.T) {
	item := meshKey("excludeInterfaces").Value["items"].(map[string]any)
	re := regexp.MustCompile(item["pattern"].(string))
	schemaOK := func(n string) bool { return re.MatchString(n) && n != "." && n != ".." }
	agentOK := func(n string) bool {
		return mesh.Validate(mesh.Linkerd, mesh.Config{ExcludeIfaces: []string{n}}) == nil
	}
	var names []string
	for b := range 256 {
		names = append(names, "a"+string(rune(b))+"b", string(rune(b)))
	}
	for n := range mesh.MaxIfname + 2 {
		names = append(names, strings.Repeat("e", n))
	}
	names = append(names, ".", "..", "...")
	for _, n := range names {
		if n == "" || strings.TrimSpace(n) != n || strings.Contains(n, ",") {
			continue
		}
		if s, a := schemaOK(n), agentOK(n); s != a {
			t.Errorf("interface name %q: schema %v, agent %v", n, s, a)
		}
	}
}
