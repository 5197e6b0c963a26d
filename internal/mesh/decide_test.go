package mesh

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// defaultMeshes is the chain entry's default "meshes".
func defaultMeshes() map[string]Config {
	return map[string]Config{Linkerd: {}, Istio: {}, Custom: {Enabled: ptr(false)}}
}

// trustedIstio is defaultMeshes with Istio deciding from annotations alone,
// for the tests of what the annotations say.
func trustedIstio() map[string]Config {
	m := defaultMeshes()
	m[Istio] = Config{TrustAnnotations: ptr(true)}
	return m
}

const istioStatusSidecar = `{"initContainers":["istio-validation"],"containers":["istio-proxy"],"volumes":["istio-envoy"],"imagePullSecrets":null,"revision":"default"}`

func istioPod(ann map[string]string) Pod {
	a := map[string]string{IstioStatus: istioStatusSidecar}
	for k, v := range ann {
		a[k] = v
	}
	return Pod{Namespace: "ns", Name: "p", Annotations: a}
}

func linkerdSpecPod(ann map[string]string, init ...Container) Pod {
	a := map[string]string{LinkerdProxyVersion: "edge-26.8.1"}
	for k, v := range ann {
		a[k] = v
	}
	return Pod{Namespace: "ns", Name: "p", Annotations: a, SpecKnown: true,
		Containers:     []Container{{Name: "app"}, {Name: "linkerd-proxy", RunAsUser: ptr(int64(2102))}},
		InitContainers: init}
}

func TestDecide(t *testing.T) {
	v4 := []rules.Family{rules.IPv4}
	cases := []struct {
		name     string
		meshes   map[string]Config
		pod      Pod
		meshed   bool
		mesh     string
		reason   string
		needSpec bool
	}{
		{"no annotations from the runtime", defaultMeshes(), Pod{}, false, "", ReasonNoAnnotations, true},
		{"plain pod", defaultMeshes(), Pod{Annotations: map[string]string{}}, false, "", ReasonNoSidecar, false},
		{"plain pod, spec", defaultMeshes(), Pod{SpecKnown: true, Containers: []Container{{Name: "app"}}}, false, "", ReasonNoSidecar, false},

		{"linkerd annotation only: not conclusive", defaultMeshes(), Pod{Annotations: map[string]string{LinkerdProxyVersion: "v1"}}, false, Linkerd, ReasonNeedSpec, true},
		{"linkerd annotation, trusted", map[string]Config{Linkerd: {TrustAnnotations: ptr(true)}}, Pod{Annotations: map[string]string{LinkerdProxyVersion: "v1"}}, true, Linkerd, ReasonMeshed, false},
		{"linkerd spec", defaultMeshes(), linkerdSpecPod(nil), true, Linkerd, ReasonMeshed, false},
		{"linkerd native sidecar", defaultMeshes(), Pod{SpecKnown: true, Annotations: map[string]string{},
			InitContainers: []Container{{Name: "linkerd-proxy", RestartPolicy: "Always"}}}, true, Linkerd, ReasonMeshed, false},
		{"linkerd init container that is not a sidecar", defaultMeshes(), Pod{SpecKnown: true,
			InitContainers: []Container{{Name: "linkerd-proxy"}}}, false, "", ReasonNoSidecar, false},
		{"linkerd-init mode", defaultMeshes(), linkerdSpecPod(nil, Container{Name: "linkerd-init"}), false, Linkerd, ReasonInitContainerMode, false},
		{"linkerd network-validator is CNI mode", defaultMeshes(), linkerdSpecPod(nil, Container{Name: "linkerd-network-validator"}), true, Linkerd, ReasonMeshed, false},
		{"linkerd inject disabled", defaultMeshes(), Pod{Annotations: map[string]string{LinkerdInject: "disabled"}}, false, Linkerd, ReasonInjectDisabled, false},
		{"linkerd disabled in config", map[string]Config{Linkerd: {Enabled: ptr(false)}}, linkerdSpecPod(nil), false, "", ReasonNoSidecar, false},

		{"istio status: the spec has the proxy's identity", defaultMeshes(), istioPod(nil), false, Istio, ReasonNeedSpec, true},
		{"istio status, trusted", trustedIstio(), istioPod(nil), true, Istio, ReasonMeshed, false},
		{"istio native sidecar status, trusted", trustedIstio(), istioPod(map[string]string{IstioStatus: `{"initContainers":["istio-validation","istio-proxy"]}`}), true, Istio, ReasonMeshed, false},
		{"istio-init mode", defaultMeshes(), istioPod(map[string]string{IstioStatus: `{"initContainers":["istio-init"],"containers":["istio-proxy"]}`}), false, Istio, ReasonInitContainerMode, false},
		{"istio status without proxy", defaultMeshes(), istioPod(map[string]string{IstioStatus: `{"containers":[]}`}), false, Istio, ReasonNoSidecar, false},
		{"istio status garbage", defaultMeshes(), istioPod(map[string]string{IstioStatus: `{`}), false, Istio, ReasonNeedSpec, true},
		{"istio inject=false annotation", defaultMeshes(), istioPod(map[string]string{IstioInject: "false"}), false, Istio, ReasonInjectDisabled, false},
		{"istio inject label wins", defaultMeshes(), func() Pod {
			p := istioPod(map[string]string{IstioInject: "true"})
			p.Labels = map[string]string{IstioInject: "false"}
			return p
		}(), false, Istio, ReasonInjectDisabled, false},
		{"istio interception NONE", defaultMeshes(), istioPod(map[string]string{IstioInterceptionMode: "NONE"}), false, Istio, ReasonInterceptionNone, false},
		{"istio gateway template needs spec", defaultMeshes(), istioPod(map[string]string{IstioTemplates: "gateway"}), false, Istio, ReasonNeedSpec, true},
		{"istio gateway spec", defaultMeshes(), func() Pod {
			p := istioPod(map[string]string{IstioTemplates: "gateway"})
			p.SpecKnown = true
			p.Containers = []Container{{Name: "istio-proxy", Args: []string{"proxy", "router"}}}
			return p
		}(), false, Istio, ReasonNotSidecar, false},
		{"istio DISABLE_ENVOY", defaultMeshes(), func() Pod {
			p := istioPod(nil)
			p.SpecKnown = true
			p.Containers = []Container{{Name: "istio-proxy", Env: map[string]string{"DISABLE_ENVOY": "true"}}}
			return p
		}(), false, Istio, ReasonProxyDisabled, false},
		{"istio proxy without injector status", defaultMeshes(), Pod{SpecKnown: true, Containers: []Container{{Name: "istio-proxy"}}}, false, Istio, ReasonNotInjected, false},
		{"istio spec with istio-init", defaultMeshes(), func() Pod {
			p := istioPod(nil)
			p.SpecKnown = true
			p.Containers = []Container{{Name: "istio-proxy", Args: []string{"proxy", "sidecar"}}}
			p.InitContainers = []Container{{Name: "istio-init"}}
			return p
		}(), false, Istio, ReasonInitContainerMode, false},

		{"both meshes on one node: each by its contract", defaultMeshes(), linkerdSpecPod(nil), true, Linkerd, ReasonMeshed, false},
		{"custom select annotation", map[string]Config{Custom: {Enabled: ptr(true), SelectAnnotation: "example.com/mesh=on", ProxyUID: ptr(int64(1000)), InboundPort: 9000, OutboundPort: 9001}},
			Pod{Annotations: map[string]string{"example.com/mesh": "on"}}, true, Custom, ReasonMeshed, false},
		{"custom select annotation, other value", map[string]Config{Custom: {Enabled: ptr(true), SelectAnnotation: "example.com/mesh=on", ProxyUID: ptr(int64(1000)), InboundPort: 9000, OutboundPort: 9001}},
			Pod{Annotations: map[string]string{"example.com/mesh": "off"}}, false, "", ReasonNoSidecar, false},
		{"custom sidecar needs spec", map[string]Config{Custom: {Enabled: ptr(true), Sidecar: "envoy", ProxyUID: ptr(int64(101)), InboundPort: 9000, OutboundPort: 9001}},
			Pod{Annotations: map[string]string{}}, false, Custom, ReasonNeedSpec, true},
		{"custom sidecar in spec", map[string]Config{Custom: {Enabled: ptr(true), Sidecar: "envoy", ProxyUID: ptr(int64(101)), InboundPort: 9000, OutboundPort: 9001}},
			Pod{SpecKnown: true, Containers: []Container{{Name: "envoy"}}}, true, Custom, ReasonMeshed, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := Decide(c.meshes, c.pod, v4)
			if err != nil {
				t.Fatal(err)
			}
			if d.Meshed != c.meshed || d.Mesh != c.mesh || d.Reason != c.reason || d.NeedSpec != c.needSpec {
				t.Fatalf("got %+v, want meshed=%v mesh=%q reason=%q needSpec=%v", d, c.meshed, c.mesh, c.reason, c.needSpec)
			}
			if (d.Spec != nil) != d.Meshed {
				t.Fatalf("Spec must be set exactly when meshed: %+v", d)
			}
			if d.Meshed && !reflect.DeepEqual(d.Spec.Families, v4) {
				t.Errorf("families = %v", d.Spec.Families)
			}
		})
	}
}

func TestDecideConflict(t *testing.T) {
	p := linkerdSpecPod(map[string]string{IstioStatus: istioStatusSidecar})
	p.Containers = append(p.Containers, Container{Name: "istio-proxy"})
	_, err := Decide(defaultMeshes(), p, nil)
	if err == nil || !strings.Contains(err.Error(), "istio, linkerd") {
		t.Fatalf("a pod with two meshes' contracts must fail, got %v", err)
	}
}

func spec(t *testing.T, meshes map[string]Config, pod Pod, fams ...rules.Family) *rules.Spec {
	t.Helper()
	d, err := Decide(meshes, pod, fams)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Meshed {
		t.Fatalf("not meshed: %+v", d)
	}
	return d.Spec
}

func ports(t *testing.T, s string) []rules.PortRange {
	p, err := ParsePorts(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func cidrs(t *testing.T, s string) []netip.Prefix {
	p, err := ParseCIDRs(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLinkerdSpec(t *testing.T) {
	s := spec(t, defaultMeshes(), linkerdSpecPod(nil))
	want := rules.Spec{Mesh: Linkerd, Families: []rules.Family{rules.IPv4, rules.IPv6}, ProxyUID: 2102, InboundPort: 4143, OutboundPort: 4140,
		Mode: rules.Redirect, IgnoreInbound: ports(t, "4190,4191"), IgnoreOutbound: nil, SkipSubnets: nil, ExcludeIfaces: nil}
	if !reflect.DeepEqual(*s, want) {
		t.Errorf("default linkerd spec\n got %+v\nwant %+v", *s, want)
	}

	s = spec(t, defaultMeshes(), func() Pod {
		p := linkerdSpecPod(map[string]string{
			LinkerdSkipInboundPorts:  "25,8000-8100",
			LinkerdSkipOutboundPorts: "3306",
			LinkerdSkipSubnets:       "10.96.0.0/12, fd00::/8",
			LinkerdProxyUID:          "3000",
			LinkerdProxyGID:          "3001",
		})
		p.Containers[1].RunAsUser = nil
		p.Containers[0].RunAsGroup = ptr(int64(1000)) // the app's group is pinned and differs
		p.Labels = map[string]string{LinkerdControlPlaneLabel: "destination"}
		return p
	}())
	if !reflect.DeepEqual(s.IgnoreInbound, ports(t, "4190,4191,25,8000-8100")) {
		t.Errorf("skip-inbound-ports adds to the proxy's ports: %v", s.IgnoreInbound)
	}
	if !reflect.DeepEqual(s.IgnoreOutbound, ports(t, "3306,443,6443")) {
		t.Errorf("skip-outbound-ports + control plane API ports: %v", s.IgnoreOutbound)
	}
	if !reflect.DeepEqual(s.SkipSubnets, cidrs(t, "10.96.0.0/12,fd00::/8")) || s.SkipOutboundSubnets != nil {
		t.Errorf("skip-subnets skips inbound sources only: %v, outbound %v", s.SkipSubnets, s.SkipOutboundSubnets)
	}
	if s.ProxyUID != 3000 || s.ProxyGID == nil || *s.ProxyGID != 3001 {
		t.Errorf("uid/gid: %d %v", s.ProxyUID, s.ProxyGID)
	}

	// The container's runAsUser is what the proxy really runs as.
	p := linkerdSpecPod(map[string]string{LinkerdProxyUID: "3000"})
	p.Containers[1].RunAsUser = ptr(int64(4000))
	if s := spec(t, defaultMeshes(), p); s.ProxyUID != 4000 {
		t.Errorf("runAsUser must win: %d", s.ProxyUID)
	}
}

// An empty Linkerd annotation is no override: the configured value stays,
// as linkerd-cni reads it (linkerd2-proxy-init cni-plugin/main.go at
// 5709c11, getAnnotationOverride lines 421-438 returns "" for an empty
// value and cmdAdd overrides only a non-empty one, lines 240, 251, 263,
// 275, 294).
func TestLinkerdEmptyAnnotationIsNoOverride(t *testing.T) {
	m := defaultMeshes()
	m[Linkerd] = Config{ProxyGID: ptr(int64(2102)), IgnoreOutbound: []string{"5432"}, SkipSubnets: []string{"10.0.0.0/8"}}
	p := linkerdSpecPod(map[string]string{LinkerdSkipInboundPorts: "", LinkerdSkipOutboundPorts: "", LinkerdSkipSubnets: "",
		LinkerdProxyUID: "", LinkerdProxyGID: ""})
	p.Containers[1].RunAsUser = nil
	p.Containers[0].RunAsGroup = ptr(int64(1000)) // the app's group is pinned and differs
	d, err := Decide(m, p, nil)
	if err != nil {
		t.Fatalf("empty annotations must not fail the pod: %v", err)
	}
	s := d.Spec
	if s.ProxyUID != 2102 || s.ProxyGID == nil || *s.ProxyGID != 2102 {
		t.Errorf("empty proxy-uid/proxy-gid must keep the configured ones: %d %v", s.ProxyUID, s.ProxyGID)
	}
	if !reflect.DeepEqual(s.IgnoreOutbound, ports(t, "5432")) || !reflect.DeepEqual(s.SkipSubnets, cidrs(t, "10.0.0.0/8")) ||
		!reflect.DeepEqual(s.IgnoreInbound, ports(t, "4190,4191")) {
		t.Errorf("empty skip lists must keep the configured ones: in %v out %v subnets %v", s.IgnoreInbound, s.IgnoreOutbound, s.SkipSubnets)
	}
}

func TestIstioSpec(t *testing.T) {
	s := spec(t, trustedIstio(), istioPod(nil), rules.IPv4, rules.IPv6)
	if s.ProxyUID != 1337 || s.ProxyGID != nil || s.InboundPort != 15006 || s.OutboundPort != 15001 || s.TunnelPort != 15008 ||
		!s.LoopbackToInbound || s.Mode != rules.Redirect || s.CaptureDNS || s.IncludeSubnets != nil || s.InboundPorts != nil ||
		!reflect.DeepEqual(s.IgnoreInbound, ports(t, "15020,15021,15090")) || !reflect.DeepEqual(s.IgnoreOutbound, ports(t, "15020")) {
		t.Errorf("default istio spec: %+v", *s)
	}
	s = spec(t, trustedIstio(), istioPod(map[string]string{
		IstioInterceptionMode:      "TPROXY",
		IstioIncludeOutboundRanges: "10.0.0.0/8,fd00::/8",
		IstioExcludeOutboundRanges: "10.1.0.0/16",
		IstioIncludeInboundPorts:   "8080,9090",
		IstioExcludeInboundPorts:   "9999",
		IstioIncludeOutboundPorts:  "443",
		IstioExcludeOutboundPorts:  "5555-5556",
		IstioExcludeInterfaces:     "net1",
		IstioProxyConfig:           "proxyMetadata:\n  ISTIO_META_DNS_CAPTURE: \"true\"\n",
	}))
	checks := []struct {
		name      string
		got, want any
	}{
		{"mode", s.Mode, rules.TProxy},
		{"include subnets", s.IncludeSubnets, cidrs(t, "10.0.0.0/8,fd00::/8")},
		{"skip outbound", s.SkipOutboundSubnets, cidrs(t, "10.1.0.0/16")},
		{"skip inbound sources untouched", s.SkipSubnets, []netip.Prefix(nil)},
		{"inbound ports", s.InboundPorts, ports(t, "8080,9090")},
		{"ignore inbound", s.IgnoreInbound, ports(t, "15020,15021,15090,9999")},
		{"include outbound", s.IncludeOutbound, ports(t, "443")},
		{"ignore outbound", s.IgnoreOutbound, ports(t, "5555-5556")},
		{"ifaces", s.ExcludeIfaces, []string{"net1"}},
		{"dns", s.CaptureDNS, true},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %#v, want %#v", c.name, c.got, c.want)
		}
	}

	s = spec(t, trustedIstio(), istioPod(map[string]string{IstioIncludeInboundPorts: "", IstioIncludeOutboundRanges: "", IstioIncludeOutboundPorts: "3306"}))
	if s.InboundPorts == nil || len(s.InboundPorts) != 0 || s.IncludeSubnets == nil || len(s.IncludeSubnets) != 0 {
		t.Errorf(`"" means none, not all: %+v`, *s)
	}
	s = spec(t, trustedIstio(), istioPod(map[string]string{IstioIncludeInboundPorts: "*", IstioIncludeOutboundRanges: "*"}))
	if s.InboundPorts != nil || s.IncludeSubnets != nil {
		t.Errorf(`"*" means all: %+v`, *s)
	}

	// Spec known: the proxy's env and identity decide.
	p := istioPod(map[string]string{IstioProxyConfig: "proxyMetadata: {ISTIO_META_DNS_CAPTURE: 'true'}"})
	p.SpecKnown = true
	p.Containers = []Container{{Name: "istio-proxy", Args: []string{"proxy", "sidecar"}, RunAsUser: ptr(int64(1500)), RunAsGroup: ptr(int64(1501)),
		Env: map[string]string{IstioDNSCaptureEnv: "false"}}}
	s = spec(t, defaultMeshes(), p)
	if s.ProxyUID != 1500 || *s.ProxyGID != 1501 || s.CaptureDNS {
		t.Errorf("spec-known istio: uid=%d gid=%d dns=%v", s.ProxyUID, *s.ProxyGID, s.CaptureDNS)
	}
	// Config default for DNS capture, mesh-wide.
	s = spec(t, map[string]Config{Istio: {CaptureDNS: ptr(true), TrustAnnotations: ptr(true)}}, istioPod(nil))
	if !s.CaptureDNS || s.DNSPort != 15053 {
		t.Errorf("mesh-wide DNS capture: %+v", *s)
	}
}

// Invalid values fail with the annotation and the value in the error, and
// only for the mesh that claims the pod.
func TestBadAnnotations(t *testing.T) {
	cases := []struct {
		pod  Pod
		want string
	}{
		{linkerdSpecPod(map[string]string{LinkerdSkipInboundPorts: "80,http"}), `config.linkerd.io/skip-inbound-ports="80,http": invalid port "http"`},
		{linkerdSpecPod(map[string]string{LinkerdSkipOutboundPorts: "70000"}), `config.linkerd.io/skip-outbound-ports="70000"`},
		{linkerdSpecPod(map[string]string{LinkerdSkipSubnets: "10.0.0.0/33"}), `config.linkerd.io/skip-subnets="10.0.0.0/33": invalid CIDR`},
		{linkerdSpecPod(map[string]string{LinkerdProxyUID: "-5"}), `config.linkerd.io/proxy-uid="-5"`},
		{linkerdSpecPod(map[string]string{LinkerdProxyGID: "abc"}), `config.linkerd.io/proxy-gid="abc"`},
		{istioPod(map[string]string{IstioInterceptionMode: "MAGIC"}), `sidecar.istio.io/interceptionMode="MAGIC"`},
		{istioPod(map[string]string{IstioIncludeOutboundRanges: "10.0.0.0/8,bogus"}), `includeOutboundIPRanges="10.0.0.0/8,bogus": invalid IP or CIDR "bogus"`},
		{istioPod(map[string]string{IstioExcludeOutboundRanges: "*"}), `excludeOutboundIPRanges="*"`},
		{istioPod(map[string]string{IstioIncludeInboundPorts: "0"}), `includeInboundPorts="0"`},
		{istioPod(map[string]string{IstioExcludeInboundPorts: "1-"}), `excludeInboundPorts="1-"`},
		{istioPod(map[string]string{IstioIncludeOutboundPorts: "x"}), `includeOutboundPorts="x"`},
		{istioPod(map[string]string{IstioExcludeOutboundPorts: ",,"}), `excludeOutboundPorts=",,"`},
		{istioPod(map[string]string{IstioExcludeInterfaces: "a/b"}), `excludeInterfaces="a/b"`},
		{istioPod(map[string]string{IstioProxyConfig: "proxyMetadata: [oops"}), `proxy.istio.io/config=`},
		{istioPod(map[string]string{IstioProxyConfig: "proxyMetadata: {ISTIO_META_DNS_CAPTURE: maybe}"}), `ISTIO_META_DNS_CAPTURE="maybe" is not a boolean`},
	}
	for _, c := range cases {
		_, err := Decide(trustedIstio(), c.pod, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want it to contain %q", err, c.want)
		}
	}
	// A bad istio annotation on a pod no mesh claims is no error.
	if _, err := Decide(defaultMeshes(), Pod{Annotations: map[string]string{IstioIncludeInboundPorts: "x"}}, nil); err != nil {
		t.Errorf("unclaimed pod: %v", err)
	}
}

// A Set decides many pods: one pod's annotations (which add to the base
// lists) must not leak into the next pod's rules.
func TestSetDecideIsolatesPods(t *testing.T) {
	eff := map[string]Config{}
	for name, c := range trustedIstio() {
		eff[name] = c.WithDefaults(name)
	}
	s, err := NewSet(eff)
	if err != nil {
		t.Fatal(err)
	}
	plain := istioPod(nil)
	first, err := s.Decide(plain, nil)
	if err != nil || !first.Meshed {
		t.Fatal(first, err)
	}
	for range 3 {
		if d, err := s.Decide(istioPod(map[string]string{IstioExcludeInboundPorts: "9000", IstioExcludeInterfaces: "eth9"}), nil); err != nil || !d.Meshed {
			t.Fatal(d, err)
		}
	}
	again, err := s.Decide(plain, nil)
	if err != nil || !reflect.DeepEqual(again, first) {
		t.Errorf("the same pod decides differently after other pods:\n%+v\n%+v", again.Spec, first.Spec)
	}
}

// Every profile without a default sidecar needs sidecar or
// selectAnnotation to know its pods.
func TestProfileNeedsSelector(t *testing.T) {
	for _, name := range Profiles {
		d, _ := Defaults(name)
		c := Config{Enabled: ptr(true), ProxyUID: ptr(int64(1)), InboundPort: 1, OutboundPort: 2}
		err := Validate(name, c)
		if d.Sidecar == "" && (err == nil || !strings.Contains(err.Error(), "needs sidecar or selectAnnotation")) {
			t.Errorf("%s without sidecar and selectAnnotation: %v", name, err)
		}
		if d.Sidecar != "" && err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// An oversized annotation value is cut in the error, for every contract:
// the message still names the annotation and the reason.
func TestAnnotationErrorsAreClipped(t *testing.T) {
	huge := strings.Repeat("8", 100_000)
	for _, tc := range []struct {
		meshes map[string]Config
		pod    Pod
		key    string
	}{
		{defaultMeshes(), linkerdSpecPod(map[string]string{LinkerdSkipInboundPorts: "80," + huge}, Container{Name: "linkerd-network-validator"}), LinkerdSkipInboundPorts},
		{kumaOn(), kumaSpecPod(map[string]string{KumaConfig: "kumaDPUser: '" + huge + "'"}, false), KumaConfig},
		{consulOn(), consulPod(`{"ProxyUserID":"`+huge+`","ProxyInboundPort":1}`, false), ConsulRedirectConfig},
	} {
		_, err := Decide(tc.meshes, tc.pod, nil)
		if err == nil || len(err.Error()) > 1000 || !strings.Contains(err.Error(), "bytes cut]") || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%s: error of %d bytes, want it cut and naming the annotation: %.300s", tc.key, len(fmt.Sprint(err)), err)
		}
	}
}

// skipOutboundSubnets is the setting that skips outbound destinations, off
// by default; Linkerd's skip-subnets annotation does not touch it.
func TestSkipOutboundSubnets(t *testing.T) {
	m := defaultMeshes()
	m[Linkerd] = Config{SkipSubnets: []string{"10.1.0.0/16"}, SkipOutboundSubnets: []string{"169.254.169.254/32"}}
	s := spec(t, m, linkerdSpecPod(map[string]string{LinkerdSkipSubnets: "10.96.0.0/12"}))
	if !reflect.DeepEqual(s.SkipSubnets, cidrs(t, "10.96.0.0/12")) || !reflect.DeepEqual(s.SkipOutboundSubnets, cidrs(t, "169.254.169.254/32")) {
		t.Errorf("linkerd: inbound %v, outbound %v", s.SkipSubnets, s.SkipOutboundSubnets)
	}
	s = spec(t, m, linkerdSpecPod(nil))
	if !reflect.DeepEqual(s.SkipSubnets, cidrs(t, "10.1.0.0/16")) || !reflect.DeepEqual(s.SkipOutboundSubnets, cidrs(t, "169.254.169.254/32")) {
		t.Errorf("linkerd defaults: inbound %v, outbound %v", s.SkipSubnets, s.SkipOutboundSubnets)
	}
	if d, _ := Defaults(Linkerd); d.SkipOutboundSubnets != nil {
		t.Errorf("skipOutboundSubnets is on by default: %v", d.SkipOutboundSubnets)
	}
}
