package mesh

import (
	"os"
	"strings"
	"testing"
)

// parityRow is one row of the input-parity tables in README.md: the
// input as the table writes it, the annotations it stands for, and what
// mesh-cni does with it ("" accepts; else a part of the error).
type parityRow struct {
	input   string
	ann     map[string]string
	wantErr string
}

// kumaParity: kuma-cni v2.14.3's verdicts are cited in README.md.
var kumaParity = []parityRow{
	{"`exclude-outbound-ports: \"\"`", map[string]string{KumaExcludeOutbound: ""}, "empty port list"},
	{"`exclude-outbound-ports: \"5432, 8000-8100\"`", map[string]string{KumaExcludeOutbound: "5432, 8000-8100"}, `invalid port " 8000-8100"`},
	{"`exclude-outbound-ports: \"8000-8100\"`", map[string]string{KumaExcludeOutbound: "8000-8100"}, `invalid port "8000-8100"`},
	{"`exclude-outbound-ports: \"5432,8000\"`", map[string]string{KumaExcludeOutbound: "5432,8000"}, ""},
	{"`exclude-outbound-ports: \"0\"`", map[string]string{KumaExcludeOutbound: "0"}, `invalid port "0"`},
	{"`exclude-inbound-ports: \"\"`, probe port `\"0\"`", map[string]string{KumaExcludeInbound: "", KumaProbeProxyPort: "0"}, "nothing is left"},
	{"`exclude-inbound-ports: \"\"`, probe port default", map[string]string{KumaExcludeInbound: ""}, ""},
	{"`exclude-inbound-ports: \"http\"` on a gateway", map[string]string{KumaExcludeInbound: "http", KumaGateway: "enabled"}, `invalid port "http"`},
	{"`exclude-outbound-ips: \"\"`", map[string]string{KumaExcludeOutIPs: ""}, "IPs cannot be empty"},
	{"`ip-family-mode: \"\"`", map[string]string{KumaIPFamilyMode: ""}, "want dualstack or ipv4"},
	{"`ip-family-mode: \"ipv6\"`", map[string]string{KumaIPFamilyMode: "ipv6"}, "want dualstack or ipv4"},
	{"`sidecar-uid: \"kuma-dp\"`", map[string]string{KumaSidecarUID: "kuma-dp"}, "invalid user or group ID"},
	{"`exclude-outbound-ports-for-uids: \"1000-2000\"`", map[string]string{KumaExcludeOutForUIDs: "1000-2000"}, ""},
	{"`builtin-dns: \"yes\"`", map[string]string{KumaBuiltinDNS: "yes"}, "want enabled, disabled, true or false"},
	{"`drop-invalid-packets: \"true\"`", map[string]string{KumaDropInvalid: "true"}, ""},
	{"`drop-invalid-packets: \"yes\"`", map[string]string{KumaDropInvalid: "yes"}, "want enabled, disabled, true or false"},
	{"config `excludePorts: [\"8000-8100\"]`", map[string]string{KumaConfig: "redirect: {outbound: {excludePorts: ['8000-8100']}}"}, "not ranges"},
	{"config `excludePorts: \"80,,90\"`", map[string]string{KumaConfig: "redirect: {outbound: {excludePorts: '80,,90'}}"}, "empty item"},
	{"config `kumaDPUser: kuma-dp`", map[string]string{KumaConfig: "kumaDPUser: kuma-dp"}, "kumaDPUser"},
	{"config `dropInvalidPackets: true`", map[string]string{KumaConfig: "dropInvalidPackets: true"}, ""},
	{"config `ipFamilyMode: ipv4`", map[string]string{KumaConfig: "ipFamilyMode: ipv4"}, ""},
}

// consulParity: consul-cni v2.0.3 with the sdk v0.18.1; each input
// changes the injector's default configuration (consulConfig).
var consulParity = []parityRow{
	{"`ExcludeOutboundPorts: [\"8000-8100\"]`", consulAnn(`"ExcludeOutboundPorts":["8000-8100"]`, "false"), "first:last"},
	{"`ExcludeInboundPorts: [\"8000:8100\"]`", consulAnn(`"ExcludeInboundPorts":["8000:8100"]`, "false"), ""},
	{"`ExcludeOutboundPorts: [\"http\"]`", consulAnn(`"ExcludeOutboundPorts":["http"]`, "false"), `invalid port "http"`},
	{"`ExcludeOutboundCIDRs: [\"fd00::/8\"]`, dual-stack `\"false\"`", consulAnn(`"ExcludeOutboundCIDRs":["fd00::/8"]`, "false"), "is IPv6 but"},
	{"`ExcludeOutboundCIDRs: [\"10.0.0.0/8\",\"fd00::/8\"]`, dual-stack `\"true\"`", consulAnn(`"ExcludeOutboundCIDRs":["10.0.0.0/8","fd00::/8"],"ConsulDNSIP":"::1"`, "true"), ""},
	{"`ConsulDNSIP: \"::1\"`, dual-stack `\"false\"`", consulAnn(`"ConsulDNSIP":"::1"`, "false"), "wants an IPv4 address"},
	{"`ConsulDNSIP: \"127.0.0.1\"`, dual-stack `\"true\"`", consulAnn(`"ConsulDNSIP":"127.0.0.1"`, "true"), "wants an IPv6 address"},
	{"`ExcludeUIDs: [\"1000-2000\"]`", consulAnn(`"ExcludeUIDs":["1000-2000"]`, "false"), ""},
	{"`ExcludeUIDs: [\"nobody\"]`", consulAnn(`"ExcludeUIDs":["nobody"]`, "false"), "user name is not taken"},
	{"`ProxyUserID: \"5995-5996\"`", consulAnn(`"ProxyUserID":"5995-5996"`, "false"), "ProxyUserID"},
	{"no `dual-stack` annotation", consulAnn("", ""), ""},
	{"`ConsulDNSIP: \"10.96.0.10\"`", consulAnn(`"ConsulDNSIP":"10.96.0.10"`, "false"), "not a loopback address"},
}

// consulAnn is the injector's default configuration with fields replaced
// (a JSON fragment), and the dual-stack annotation ("": none).
func consulAnn(fields, dualStack string) map[string]string {
	cfg := consulConfig
	if fields != "" {
		cfg = "{" + fields + "," + strings.TrimPrefix(cfg, "{")
		// The later key of a duplicated pair would win: drop the default's.
		for _, k := range []string{"ExcludeOutboundPorts", "ExcludeInboundPorts", "ExcludeOutboundCIDRs", "ConsulDNSIP", "ExcludeUIDs", "ProxyUserID"} {
			if strings.Contains(fields, `"`+k+`"`) {
				cfg = dropSecond(cfg, `"`+k+`"`)
			}
		}
	}
	a := map[string]string{ConsulRedirectConfig: cfg}
	if dualStack != "" {
		a[ConsulDualStack] = dualStack
	}
	return a
}

// dropSecond removes the second "key":value pair of key from a flat JSON
// object whose values hold no commas outside brackets.
func dropSecond(obj, key string) string {
	first := strings.Index(obj, key)
	i := first + 1 + strings.Index(obj[first+1:], key)
	depth, j := 0, i
	for ; j < len(obj); j++ {
		switch obj[j] {
		case '[':
			depth++
		case ']':
			depth--
		case ',', '}':
			if depth == 0 {
				return obj[:i-1] + obj[j:]
			}
		}
	}
	return obj
}

// TestInputParity runs every row of the parity tables and checks the
// README holds each row.
func TestInputParity(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, rows []parityRow, decide func(map[string]string) (Decision, error)) {
		for _, r := range rows {
			t.Run(r.input, func(t *testing.T) {
				if !strings.Contains(string(readme), "| "+r.input+" |") {
					t.Errorf("README.md has no parity row for %s", r.input)
				}
				d, err := decide(r.ann)
				switch {
				case r.wantErr == "" && (err != nil || !d.Meshed):
					t.Errorf("want accepted, got %+v %v", d, err)
				case r.wantErr != "" && (err == nil || !strings.Contains(err.Error(), r.wantErr)):
					t.Errorf("want an error with %q, got %+v %v", r.wantErr, d, err)
				}
			})
		}
	}
	t.Run("kuma", func(t *testing.T) {
		run(t, kumaParity, func(a map[string]string) (Decision, error) {
			return Decide(kumaOn(), kumaSpecPod(a, false), nil)
		})
	})
	t.Run("consul", func(t *testing.T) {
		run(t, consulParity, func(a map[string]string) (Decision, error) {
			p := consulPod("", true)
			for k, v := range a {
				p.Annotations[k] = v
			}
			return Decide(consulOn(), p, nil)
		})
	})
}
