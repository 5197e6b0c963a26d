package mesh

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/rules"
)

func consulOn() map[string]Config { return map[string]Config{Consul: {Enabled: ptr(true)}} }

// consulConfig is what consul-k8s's injector writes with DNS and metrics
// on (iptables.Config of github.com/hashicorp/consul/sdk v0.18.1, marshalled;
// control-plane/connect-inject/webhook/redirect_traffic.go).
const consulConfig = `{"ConsulDNSIP":"127.0.0.1","ConsulDNSPort":8600,"ProxyUserID":"5995","ProxyInboundPort":20000,"ProxyOutboundPort":15001,"ExcludeInboundPorts":["20200"],"ExcludeOutboundPorts":null,"ExcludeOutboundCIDRs":null,"ExcludeUIDs":["5996"],"NetNS":"","IptablesProvider":null}`

func consulPod(cfg string, spec bool) Pod {
	a := map[string]string{ConsulInjectStatus: "injected", ConsulTProxyStatus: "enabled"}
	if cfg != "" {
		a[ConsulRedirectConfig] = cfg
	}
	p := Pod{Namespace: "ns", Name: "p", Annotations: a}
	if spec {
		p.SpecKnown = true
		p.InitContainers = []Container{{Name: "consul-connect-inject-init", RunAsUser: ptr(int64(5996)), RunAsGroup: ptr(int64(5996))}}
		p.Containers = []Container{{Name: "app", RunAsUser: ptr(int64(1000)), RunAsGroup: ptr(int64(1000))},
			{Name: "consul-dataplane", RunAsUser: ptr(int64(5995)), RunAsGroup: ptr(int64(5995))}}
	}
	return p
}

func TestConsulDecide(t *testing.T) {
	cases := []struct {
		name   string
		pod    Pod
		meshed bool
		reason string
	}{
		{"annotations decide", consulPod(consulConfig, false), true, ReasonMeshed},
		{"spec", consulPod(consulConfig, true), true, ReasonMeshed},
		{"status rewritten by consul-cni", func() Pod {
			p := consulPod(consulConfig, false)
			p.Annotations[ConsulTProxyStatus] = "complete"
			return p
		}(), true, ReasonMeshed},
		{"mesh-inject status", func() Pod {
			p := consulPod(consulConfig, false)
			delete(p.Annotations, ConsulInjectStatus)
			p.Annotations[ConsulMeshInjectStatus] = "injected"
			return p
		}(), true, ReasonMeshed},
		{"no transparent proxy", func() Pod {
			p := consulPod(consulConfig, false)
			delete(p.Annotations, ConsulTProxyStatus)
			return p
		}(), false, ReasonNotInjected},
		{"no config: the init container redirects", consulPod("", false), false, ReasonInitContainerMode},
		{"not injected", Pod{Annotations: map[string]string{}}, false, ReasonNoSidecar},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Decide(consulOn(), tc.pod, nil)
			if err != nil {
				t.Fatal(err)
			}
			if d.Meshed != tc.meshed || d.Reason != tc.reason {
				t.Errorf("got meshed %v reason %q, want %v %q", d.Meshed, d.Reason, tc.meshed, tc.reason)
			}
		})
	}
}

func TestConsulSpec(t *testing.T) {
	d, err := Decide(consulOn(), consulPod(consulConfig, true), nil)
	if err != nil || !d.Meshed {
		t.Fatalf("%+v %v", d, err)
	}
	s := *d.Spec
	if s.ProxyUID != 5995 || s.ProxyGID == nil || *s.ProxyGID != 5995 || s.InboundPort != 20000 || s.OutboundPort != 15001 {
		t.Errorf("identity and ports: %+v", s)
	}
	if !s.CaptureDNS || s.DNSPort != 8600 || s.DNSUDPOnly || !reflect.DeepEqual(s.DNSDest, []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}) {
		t.Errorf("DNS: %+v", s)
	}
	if !reflect.DeepEqual(s.ExemptUIDs, []rules.UIDExemption{{First: 5996, Last: 5996}}) || !reflect.DeepEqual(s.IgnoreInbound, []rules.PortRange{{First: 20200, Last: 20200}}) {
		t.Errorf("exclusions: %+v", s)
	}
	// The pod's configuration is the whole of its rules: the profile's
	// lists do not apply.
	m := consulOn()
	m[Consul] = Config{Enabled: ptr(true), IgnoreOutbound: []string{"443"}, SkipSubnets: []string{"10.0.0.0/8"}}
	d, err = Decide(m, consulPod(`{"ProxyUserID":"6000","ProxyInboundPort":21000,"ExcludeOutboundCIDRs":["10.1.0.0/16"]}`, false), nil)
	if err != nil {
		t.Fatal(err)
	}
	if s := d.Spec; s.ProxyUID != 6000 || s.InboundPort != 21000 || s.OutboundPort != 15001 || s.IgnoreOutbound != nil || s.SkipSubnets != nil || s.CaptureDNS ||
		!reflect.DeepEqual(s.SkipOutboundSubnets, []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}) {
		t.Errorf("from the configuration alone: %+v", s)
	}
}

func TestConsulBadConfig(t *testing.T) {
	for cfg, want := range map[string]string{
		`{"ProxyUserID":"5995","ProxyInboundPort":20000,"ProxyPort":1}`:                               `unknown field "ProxyPort"`,
		`{"proxyuserid":"5995","ProxyInboundPort":20000}`:                                             `unknown field "proxyuserid"`,
		`{"ProxyUserID":5995,"ProxyInboundPort":20000}`:                                               "field ProxyUserID: number is not a string",
		`{"ProxyUserID":"5995","ProxyInboundPort":"20000"}`:                                           "field ProxyInboundPort: string is not a int",
		`{"ProxyInboundPort":20000}`:                                                                  "field ProxyUserID: is required",
		`{"ProxyUserID":"5995"}`:                                                                      "field ProxyInboundPort: 0 is not a port",
		`{"ProxyUserID":"5995","ProxyInboundPort":15001}`:                                             "field ProxyOutboundPort: 15001 is also the inbound port",
		`{"ProxyUserID":"x","ProxyInboundPort":20000}`:                                                "field ProxyUserID: invalid user or group ID",
		`{"ProxyUserID":"5995","ProxyInboundPort":20000,"ExcludeInboundPorts":["8080,x"]}`:            "field ExcludeInboundPorts",
		`{"ProxyUserID":"5995","ProxyInboundPort":20000,"ExcludeOutboundCIDRs":["10.0.0.0/40"]}`:      "field ExcludeOutboundCIDRs",
		`{"ProxyUserID":"5995","ProxyInboundPort":20000,"ExcludeUIDs":["-1"]}`:                        "field ExcludeUIDs",
		`{"ProxyUserID":"5995","ProxyInboundPort":20000,"ConsulDNSIP":"10.96.0.10"}`:                  "field ConsulDNSPort: is required with ConsulDNSIP",
		`{"ProxyUserID":"5995","ProxyInboundPort":20000,"ConsulDNSIP":"10.0.0.1","ConsulDNSPort":53}`: "field ConsulDNSIP",
		`{"ProxyUserID":"5995","ProxyInboundPort":20000,"IptablesProvider":{}}`:                       "field IptablesProvider: must be null",
		`[1]`: "not a JSON object",
	} {
		_, err := Decide(consulOn(), consulPod(cfg, false), nil)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), ConsulRedirectConfig) {
			t.Errorf("%s: got %v, want an error naming the annotation and %q", cfg, err, want)
		}
	}
}

// FuzzConsulRedirect: no input panics; what parses and converts gives a
// Spec with a proxy UID and two distinct redirect ports, and the decision
// names the annotation when it refuses.
func FuzzConsulRedirect(f *testing.F) {
	f.Add(consulConfig)
	f.Add(`{"ProxyUserID":"1","ProxyInboundPort":1,"ProxyOutboundPort":2,"ExcludeUIDs":["0"],"ConsulDNSIP":"::1","ConsulDNSPort":1}`)
	f.Add(`{"ProxyUserID":"5995","ProxyInboundPort":20000,"ExcludeInboundPorts":["1-65535"],"ExcludeOutboundCIDRs":["::/0"]}`)
	f.Fuzz(func(t *testing.T, raw string) {
		c, err := ParseConsulRedirect(raw)
		if err != nil {
			return
		}
		s, err := c.spec(rules.Spec{Mesh: Consul}, len(raw)%2 == 0)
		if err != nil {
			return
		}
		if s.InboundPort == 0 || s.OutboundPort == 0 || s.InboundPort == s.OutboundPort {
			t.Fatalf("accepted %q with ports %d/%d", raw, s.InboundPort, s.OutboundPort)
		}
		if s.CaptureDNS && (s.DNSPort == 0 || len(s.DNSDest) != 1 || !s.DNSDest[0].Addr().IsLoopback()) {
			t.Fatalf("accepted %q with DNS %+v", raw, s)
		}
		rules.Generate(s)
	})
}
