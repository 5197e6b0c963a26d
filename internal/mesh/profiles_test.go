package mesh

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestDefaults(t *testing.T) {
	l, _ := Defaults(Linkerd)
	if l.Sidecar != "linkerd-proxy" || *l.ProxyUID != 2102 || l.ProxyGID != nil || l.InboundPort != 4143 || l.OutboundPort != 4140 ||
		strings.Join(l.IgnoreInbound, ",") != "4190,4191" || !*l.Enabled {
		t.Errorf("linkerd defaults: %+v", l)
	}
	i, _ := Defaults(Istio)
	if i.Sidecar != "istio-proxy" || *i.ProxyUID != 1337 || *i.ProxyGID != 1337 || i.InboundPort != 15006 || i.OutboundPort != 15001 ||
		i.TunnelPort != 15008 || i.DNSPort != 15053 || strings.Join(i.IgnoreInbound, ",") != "15020,15021,15090" || !*i.Enabled {
		t.Errorf("istio defaults: %+v", i)
	}
	c, _ := Defaults(Custom)
	if *c.Enabled {
		t.Error("custom must be disabled by default")
	}
	if _, err := Defaults("cilium"); err == nil || !strings.Contains(err.Error(), `unknown mesh profile "cilium"`) {
		t.Errorf("unknown profile: %v", err)
	}
}

func TestWithDefaults(t *testing.T) {
	var c Config
	if err := json.Unmarshal([]byte(`{"inboundPort": 5000, "ignoreInboundPorts": []}`), &c); err != nil {
		t.Fatal(err)
	}
	got := c.WithDefaults(Linkerd)
	if got.InboundPort != 5000 || got.OutboundPort != 4140 || got.IgnoreInbound == nil || len(got.IgnoreInbound) != 0 {
		t.Errorf("explicit values and [] must survive: %+v", got)
	}
	// Defaults are copied, never shared.
	got.IgnoreOutbound = append(got.IgnoreOutbound, "1")
	*got.ProxyUID = 1
	if d, _ := Defaults(Linkerd); *d.ProxyUID != 2102 || len(Config{}.WithDefaults(Linkerd).IgnoreOutbound) != 0 {
		t.Error("defaults were modified through a filled config")
	}
}

func TestValidate(t *testing.T) {
	for _, name := range Profiles {
		if err := Validate(name, Config{}); err != nil {
			t.Errorf("%s defaults invalid: %v", name, err)
		}
	}
	bad := []struct {
		name string
		conf string
		want string
	}{
		{"cilium", `{}`, "unknown mesh profile"},
		{Custom, `{"enabled": true, "proxyUID": 1, "inboundPort": 1, "outboundPort": 2}`, "meshes.custom.sidecar: the custom profile needs sidecar or selectAnnotation"},
		{Custom, `{"enabled": true, "sidecar": "envoy", "inboundPort": 1, "outboundPort": 2}`, "meshes.custom.proxyUID: is required"},
		{Custom, `{"enabled": true, "sidecar": "envoy", "proxyUID": 1, "outboundPort": 2}`, "meshes.custom.inboundPort: 0 is not a port"},
		{Custom, `{"enabled": true, "selectAnnotation": "=x", "proxyUID": 1, "inboundPort": 1, "outboundPort": 2}`, "meshes.custom.selectAnnotation"},
		{Linkerd, `{"inboundPort": 70000}`, "meshes.linkerd.inboundPort: 70000"},
		{Linkerd, `{"outboundPort": 4143}`, "also the inbound port"},
		{Linkerd, `{"proxyUID": -1}`, "meshes.linkerd.proxyUID: -1"},
		{Linkerd, `{"proxyUID": 4294967295}`, "meshes.linkerd.proxyUID"},
		{Istio, `{"interceptionMode": "NONE"}`, `meshes.istio.interceptionMode: "NONE"`},
		{Istio, `{"ignoreInboundPorts": ["80", "x"]}`, `meshes.istio.ignoreInboundPorts: invalid port "x"`},
		{Istio, `{"portsToRedirect": ["0"]}`, `meshes.istio.portsToRedirect`},
		{Istio, `{"skipSubnets": ["10.0.0.0/40"]}`, `meshes.istio.skipSubnets: invalid CIDR "10.0.0.0/40"`},
		{Istio, `{"includeSubnets": ["nope"]}`, `meshes.istio.includeSubnets`},
		{Istio, `{"excludeInterfaces": ["a b"]}`, `meshes.istio.excludeInterfaces`},
		{Istio, `{"captureDNS": true, "dnsPort": -1}`, `meshes.istio.dnsPort`},
	}
	for _, b := range bad {
		var c Config
		if err := json.Unmarshal([]byte(b.conf), &c); err != nil {
			t.Fatal(err)
		}
		if err := Validate(b.name, c); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("Validate(%s, %s) = %v, want %q", b.name, b.conf, err, b.want)
		}
	}
	// A disabled mesh is not checked beyond its name.
	if err := Validate(Custom, Config{Enabled: ptr(false), InboundPort: -1}); err != nil {
		t.Errorf("disabled custom: %v", err)
	}
	// "*" is accepted where it means every port or destination.
	if err := Validate(Istio, Config{InboundPorts: []string{"*"}, IncludeSubnets: []string{"*"}}); err != nil {
		t.Errorf("wildcards: %v", err)
	}
}
