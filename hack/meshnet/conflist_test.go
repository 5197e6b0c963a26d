package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

func TestConflistDualStack(t *testing.T) {
	b, err := conflist([]string{"10.244.1.0/24", "fd00:10:244:1::/64"}, "0.4.0")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Plugins []struct {
			Type string `json:"type"`
			IPAM struct {
				Routes []struct{ Dst string }      `json:"routes"`
				Ranges [][]struct{ Subnet string } `json:"ranges"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if len(c.Plugins) != 2 || c.Plugins[0].Type != "ptp" || c.Plugins[1].Type != "portmap" {
		t.Fatalf("plugins: %+v", c.Plugins)
	}
	ipam := c.Plugins[0].IPAM
	if len(ipam.Ranges) != 2 || ipam.Ranges[1][0].Subnet != "fd00:10:244:1::/64" || ipam.Routes[1].Dst != "::/0" {
		t.Fatalf("ipam: %+v", ipam)
	}
}

func TestConflistBadCIDR(t *testing.T) {
	if _, err := conflist([]string{"not-a-cidr"}, "0.4.0"); err == nil {
		t.Fatal("want an error for a bad CIDR")
	}
}

func TestWriteAtomicReplaces(t *testing.T) {
	p := filepath.Join(t.TempDir(), "10-meshnet.conflist")
	if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := writeAtomic(p, []byte("new")); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	st, _ := os.Stat(p)
	if string(b) != "new" || st.Mode().Perm() != 0o644 {
		t.Fatalf("got %q mode %v", b, st.Mode())
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(p), ".meshnet-*"))
	if len(left) != 0 {
		t.Fatalf("temp files left: %v", left)
	}
}

func TestConflistVersion(t *testing.T) {
	for _, v := range []string{"0.4.0", "1.1.0"} {
		b, err := conflist([]string{"10.244.1.0/24"}, v)
		if err != nil {
			t.Fatal(err)
		}
		l, err := libcni.ConfListFromBytes(b)
		if err != nil {
			t.Fatalf("%s: libcni refuses the list: %v", v, err)
		}
		if l.CNIVersion != v {
			t.Errorf("cniVersion %q, want %q", l.CNIVersion, v)
		}
	}
}
