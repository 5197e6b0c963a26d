package mesh

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/rules"
)

func kumaOn() map[string]Config { return map[string]Config{Kuma: {Enabled: ptr(true)}} }

// kumaSpecPod is a pod as Kuma's injector writes it in CNI mode: the
// marker, kuma-validation and kuma-sidecar as 5678:5678.
func kumaSpecPod(ann map[string]string, native bool) Pod {
	a := map[string]string{KumaSidecarInjected: "true"}
	for k, v := range ann {
		a[k] = v
	}
	p := Pod{Namespace: "ns", Name: "p", Annotations: a, SpecKnown: true,
		Containers:     []Container{{Name: "app", RunAsUser: ptr(int64(1000)), RunAsGroup: ptr(int64(1000))}},
		InitContainers: []Container{{Name: "kuma-validation", RunAsUser: ptr(int64(5678)), RunAsGroup: ptr(int64(5678))}}}
	proxy := Container{Name: "kuma-sidecar", RunAsUser: ptr(int64(5678)), RunAsGroup: ptr(int64(5678))}
	if native {
		proxy.RestartPolicy = "Always"
		p.InitContainers = append(p.InitContainers, proxy)
	} else {
		p.Containers = append(p.Containers, proxy)
	}
	return p
}

func TestKumaDecide(t *testing.T) {
	cases := []struct {
		name     string
		meshes   map[string]Config
		pod      Pod
		meshed   bool
		reason   string
		needSpec bool
	}{
		{"off by default", map[string]Config{Kuma: {}}, kumaSpecPod(nil, false), false, ReasonNoSidecar, false},
		{"marker only: the spec tells the mode", kumaOn(), Pod{Annotations: map[string]string{KumaSidecarInjected: "true"}}, false, ReasonNeedSpec, true},
		{"marker only, trusted", map[string]Config{Kuma: {Enabled: ptr(true), TrustAnnotations: ptr(true)}},
			Pod{Annotations: map[string]string{KumaSidecarInjected: "true"}}, true, ReasonMeshed, false},
		{"marker not true", kumaOn(), Pod{Annotations: map[string]string{KumaSidecarInjected: "false"}}, false, ReasonNoSidecar, false},
		{"sidecar container", kumaOn(), kumaSpecPod(nil, false), true, ReasonMeshed, false},
		{"native sidecar", kumaOn(), kumaSpecPod(nil, true), true, ReasonMeshed, false},
		{"kuma-init: init-container mode", kumaOn(), func() Pod {
			p := kumaSpecPod(nil, false)
			p.InitContainers = append(p.InitContainers, Container{Name: KumaInit})
			return p
		}(), false, ReasonInitContainerMode, false},
		{"no sidecar", kumaOn(), func() Pod {
			p := kumaSpecPod(nil, false)
			p.Containers = p.Containers[:1]
			return p
		}(), false, ReasonNoSidecar, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Decide(tc.meshes, tc.pod, nil)
			if err != nil {
				t.Fatal(err)
			}
			if d.Meshed != tc.meshed || d.Reason != tc.reason || d.NeedSpec != tc.needSpec {
				t.Errorf("got meshed %v reason %q needSpec %v, want %v %q %v", d.Meshed, d.Reason, d.NeedSpec, tc.meshed, tc.reason, tc.needSpec)
			}
		})
	}
}

// kumaYAML is the shape Kuma's injector writes (yaml.Marshal of its
// config; kumahq/kuma pkg/plugins/runtime/k8s/webhooks/injector/testdata
// inject.34.golden.yaml), with exclusions set.
const kumaYAML = `cniMode: true
ipFamilyMode: dualstack
kumaDPUser: "5679"
redirect:
  dns:
    captureAll: true
    enabled: true
    port: 15054
  inbound:
    enabled: true
    excludePorts: [9001, 8443]
    excludePortsForIPs: ["10.10.0.0/16"]
    port: 15007
  outbound:
    enabled: true
    excludePorts: "5432"
    excludePortsForIPs: ["192.168.0.0/16"]
    excludePortsForUIDs: ["tcp:22,443:2000-2999", "1000"]
    port: 15002
retry:
  maxRetries: 4
  sleepBetweenRetries: 2s
wait: 5
`

func TestKumaSpec(t *testing.T) {
	decide := func(t *testing.T, ann map[string]string) rules.Spec {
		t.Helper()
		d, err := Decide(kumaOn(), kumaSpecPod(ann, true), []rules.Family{rules.IPv4})
		if err != nil || !d.Meshed {
			t.Fatalf("Decide: %+v %v", d, err)
		}
		return *d.Spec
	}
	t.Run("config annotation", func(t *testing.T) {
		s := decide(t, map[string]string{KumaConfig: kumaYAML})
		// The spec's runAsUser (5678) wins over kumaDPUser; the group is
		// exempt, no other container pins it.
		if s.ProxyUID != 5678 || s.ProxyGID == nil || *s.ProxyGID != 5678 {
			t.Errorf("identity %d/%v", s.ProxyUID, s.ProxyGID)
		}
		if s.InboundPort != 15007 || s.OutboundPort != 15002 || !s.CaptureDNS || s.DNSPort != 15054 || !s.DNSUDPOnly || !s.ExemptDNS {
			t.Errorf("ports and DNS: %+v", s)
		}
		want := []rules.UIDExemption{{First: 2000, Last: 2999, Proto: rules.TCP, Ports: []rules.PortRange{{First: 22, Last: 22}, {First: 443, Last: 443}}}, {First: 1000, Last: 1000}}
		if !reflect.DeepEqual(s.ExemptUIDs, want) {
			t.Errorf("ExemptUIDs = %+v, want %+v", s.ExemptUIDs, want)
		}
		if !reflect.DeepEqual(s.IgnoreInbound, []rules.PortRange{{First: 9001, Last: 9001}, {First: 8443, Last: 8443}}) || !reflect.DeepEqual(s.IgnoreOutbound, []rules.PortRange{{First: 5432, Last: 5432}}) {
			t.Errorf("ignore lists %v %v", s.IgnoreInbound, s.IgnoreOutbound)
		}
		if !reflect.DeepEqual(s.SkipInboundSources, []netip.Prefix{netip.MustParsePrefix("10.10.0.0/16")}) ||
			!reflect.DeepEqual(s.SkipOutboundSubnets, []netip.Prefix{netip.MustParsePrefix("192.168.0.0/16")}) {
			t.Errorf("skips %v %v", s.SkipInboundSources, s.SkipOutboundSubnets)
		}
	})
	t.Run("gateway, outbound off", func(t *testing.T) {
		s := decide(t, map[string]string{KumaConfig: "redirect: {inbound: {enabled: false}, outbound: {enabled: false}}"})
		if s.InboundPorts == nil || len(s.InboundPorts) != 0 || s.IncludeSubnets == nil || len(s.IncludeSubnets) != 0 || s.IncludeOutbound != nil {
			t.Errorf("want nothing redirected: %+v", s)
		}
	})
	t.Run("legacy annotations, defaults", func(t *testing.T) {
		s := decide(t, nil)
		if s.InboundPort != 15006 || s.OutboundPort != 15001 || s.CaptureDNS {
			t.Errorf("%+v", s)
		}
		if !reflect.DeepEqual(s.IgnoreInbound, []rules.PortRange{{First: 9901, Last: 9901}, {First: 9001, Last: 9001}}) || !reflect.DeepEqual(s.IgnoreOutbound, []rules.PortRange{{First: 9901, Last: 9901}}) {
			t.Errorf("kuma-cni's defaults: %v %v", s.IgnoreInbound, s.IgnoreOutbound)
		}
	})
	t.Run("legacy annotations", func(t *testing.T) {
		s := decide(t, map[string]string{
			KumaInboundPort: "15055", KumaExcludeInbound: "80", KumaProbeProxyPort: "0", KumaExcludeOutbound: "5432",
			KumaBuiltinDNS: "enabled", KumaBuiltinDNSPort: "15099", KumaGateway: "enabled",
			KumaExcludeOutForUIDs: "udp:53:3000;4000-4001", KumaExcludeOutIPs: "10.0.0.1",
		})
		// A gateway: kuma-cni reads no inbound exclusion at all.
		if s.InboundPort != 15055 || s.IgnoreInbound != nil || !reflect.DeepEqual(s.IgnoreOutbound, []rules.PortRange{{First: 5432, Last: 5432}}) {
			t.Errorf("%+v", s)
		}
		if !s.CaptureDNS || s.DNSPort != 15099 || s.InboundPorts == nil || len(s.InboundPorts) != 0 {
			t.Errorf("dns and gateway: %+v", s)
		}
		want := []rules.UIDExemption{{First: 3000, Last: 3000, Proto: rules.UDP, Ports: []rules.PortRange{{First: 53, Last: 53}}}, {First: 4000, Last: 4001}}
		if !reflect.DeepEqual(s.ExemptUIDs, want) {
			t.Errorf("ExemptUIDs = %+v", s.ExemptUIDs)
		}
	})
}

func TestKumaBadAnnotations(t *testing.T) {
	for ann, want := range map[[2]string]string{
		{KumaConfig, "redirect: {inbound: {port: 70000}}"}:                        "redirect.inbound.port: 70000 is not a port",
		{KumaConfig, "kumaDPUser: kuma-dp"}:                                       "kumaDPUser",
		{KumaConfig, "ipFamilyMode: ipv6"}:                                        "ipFamilyMode: want dualstack or ipv4",
		{KumaConfig, "redirect: {outbound: {excludePortsForUIDs: ['sctp:1:2']}}"}: `protocol "sctp"`,
		{KumaConfig, "redirect: {outbound: {excludePorts: [{a: 1}]}}"}:            "want a port",
		{KumaConfig, ": : :"}:                                                     "not valid",
		{KumaSidecarUID, "-1"}:                                                    KumaSidecarUID,
		{KumaExcludeInbound, "80,http"}:                                           `invalid port "http"`,
		{KumaExcludeOutForUIDs, "1:2:3:4"}:                                        "want [protocol:][ports:]uids",
		{KumaExcludeOutForUIDs, "2000-1000"}:                                      "uid range",
		{KumaIPFamilyMode, "ipv6"}:                                                KumaIPFamilyMode,
		{KumaGateway, "yes"}:                                                      "want enabled, disabled, true or false",
		{KumaExcludeOutIPs, "10.0.0.0/33"}:                                        KumaExcludeOutIPs,
	} {
		_, err := Decide(kumaOn(), kumaSpecPod(map[string]string{ann[0]: ann[1]}, false), nil)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), ann[0]) {
			t.Errorf("%s=%q: got %v, want an error naming the annotation and %q", ann[0], ann[1], err, want)
		}
	}
}

// TestKumaDropInvalid: drop-invalid-packets is honoured in both forms (the
// annotation, the config's dropInvalidPackets), never ignored.
func TestKumaDropInvalid(t *testing.T) {
	for _, ann := range []map[string]string{
		{KumaDropInvalid: "true"},
		{KumaDropInvalid: "Enabled"},
		{KumaConfig: "dropInvalidPackets: true"},
	} {
		d, err := Decide(kumaOn(), kumaSpecPod(ann, false), nil)
		if err != nil || !d.Meshed || !d.Spec.DropInvalid {
			t.Errorf("%v: want INVALID dropped, got %+v %v", ann, d.Spec, err)
			continue
		}
		if rs := rules.Generate(*d.Spec); !strings.Contains(rules.Nft(rs), "ct state invalid counter drop") {
			t.Errorf("%v: no drop rule in\n%s", ann, rules.Nft(rs))
		}
	}
	d, err := Decide(kumaOn(), kumaSpecPod(nil, false), nil)
	if err != nil || d.Spec.DropInvalid {
		t.Errorf("default: want no drop, got %+v %v", d.Spec, err)
	}
}
