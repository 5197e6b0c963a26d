package mesh

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/rules"
)

func r(a, b uint16) rules.PortRange { return rules.PortRange{First: a, Last: b} }

func TestParsePorts(t *testing.T) {
	good := map[string][]rules.PortRange{
		"":                   {},
		"  ":                 {},
		"80":                 {r(80, 80)},
		"1,65535":            {r(1, 1), r(65535, 65535)},
		" 4190 , 4191 ":      {r(4190, 4190), r(4191, 4191)},
		"8000-8100,22":       {r(8000, 8100), r(22, 22)},
		"5-5":                {r(5, 5)},
		"1 - 2":              {r(1, 2)},
		"443,443":            {r(443, 443), r(443, 443)},
		"15020,15021,15090 ": {r(15020, 15020), r(15021, 15021), r(15090, 15090)},
	}
	for in, want := range good {
		got, err := ParsePorts(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ParsePorts(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	bad := map[string]string{
		"0":         `invalid port "0"`,
		"65536":     `invalid port "65536"`,
		"-1":        `invalid port "-1"`,
		"http":      `invalid port "http"`,
		"80,":       "empty item",
		",80":       "empty item",
		"80,,81":    "empty item",
		"90-80":     "start is above end",
		"80-":       `invalid port range "80-"`,
		"80-90-100": `invalid port range "80-90-100"`,
		"80:90":     `invalid port "80:90"`,
		"*":         `invalid port "*"`,
		"1e3":       `invalid port "1e3"`,
	}
	for in, want := range bad {
		_, err := ParsePorts(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParsePorts(%q) error = %v, want it to contain %q", in, err, want)
		}
	}
}

func TestParseCIDRs(t *testing.T) {
	good := map[string][]string{
		"":                        {},
		"10.0.0.0/8":              {"10.0.0.0/8"},
		"10.1.2.3/8, 192.168.1.1": {"10.0.0.0/8", "192.168.1.1/32"},
		"fd00::/8,2001:db8::1":    {"fd00::/8", "2001:db8::1/128"},
		"0.0.0.0/0,::/0":          {"0.0.0.0/0", "::/0"},
	}
	for in, want := range good {
		got, err := ParseCIDRs(in)
		if err != nil || len(got) != len(want) {
			t.Errorf("ParseCIDRs(%q) = %v, %v; want %v", in, got, err, want)
			continue
		}
		for i := range want {
			if got[i] != netip.MustParsePrefix(want[i]) {
				t.Errorf("ParseCIDRs(%q)[%d] = %v, want %v", in, i, got[i], want[i])
			}
		}
	}
	for _, in := range []string{"10.0.0.0/33", "fd00::/129", "10.0.0", "*", "10.0.0.0/8,", "fe80::1%eth0", "host.example", "10.0.0.0/-1"} {
		if _, err := ParseCIDRs(in); err == nil {
			t.Errorf("ParseCIDRs(%q) accepted a bad value", in)
		}
	}
	if got, err := parseStarCIDRs("10.0.0.0/8, *"); err != nil || got != nil {
		t.Errorf("a * anywhere means every destination: %v %v", got, err)
	}
	if got, err := parseStarCIDRs(""); err != nil || got == nil || len(got) != 0 {
		t.Errorf(`"" means no destination (empty, non-nil): %#v %v`, got, err)
	}
}

func TestParseInterfaces(t *testing.T) {
	if got, err := parseInterfaces("eth1, net1"); err != nil || !reflect.DeepEqual(got, []string{"eth1", "net1"}) {
		t.Errorf("got %v %v", got, err)
	}
	for _, in := range []string{"a/b", "sixteen-chars-xx", "a b", `a"b`, "eth0,,eth1", ".."} {
		if _, err := parseInterfaces(in); err == nil {
			t.Errorf("parseInterfaces(%q) accepted a bad name", in)
		}
	}
}
