package backend

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/mesh-cni/mesh-cni/internal/backend/iptables"
	"github.com/mesh-cni/mesh-cni/internal/backend/nftables"
	"github.com/mesh-cni/mesh-cni/internal/rules"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// noNAT is a fake: it stands for a kernel whose nf_tables lacks NAT, which
// this machine's kernel cannot be made into. It refuses every Apply the
// way the nftables backend does for a missing feature.
type noNAT struct{ *nftables.Backend }

func (noNAT) Apply(string, rules.RuleSet) error {
	return fmt.Errorf("nftables transaction: %w: operation not supported", nftables.ErrUnsupported)
}

func TestAutoFallsBack(t *testing.T) {
	n := testenv.NewNS(t)
	a := &auto{primary: noNAT{nftables.New()}, fallback: func() (Backend, error) { return iptables.New(iptables.NFT) }}
	rs := rules.Generate(rules.Spec{Families: []rules.Family{rules.IPv4, rules.IPv6}, ProxyUID: 1337,
		InboundPort: 15006, OutboundPort: 15001, Mode: rules.TProxy})
	if err := a.Apply(n.Path(), rs); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if a.Name() != IptablesNFT {
		t.Errorf("Name after fallback = %s, want %s", a.Name(), IptablesNFT)
	}
	if err := a.Check(n.Path(), rs); err != nil {
		t.Errorf("Check: %v", err)
	}
	if err := a.Delete(n.Path()); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := a.Check(n.Path(), rs); err == nil {
		t.Error("Check after Delete: no error")
	}
	var out []byte
	var err error
	err = n.Do(func(ns.NetNS) error {
		out, err = exec.Command("iptables-nft-save").CombinedOutput()
		return err
	})
	if err != nil || strings.Contains(string(out), "MESH_") {
		t.Errorf("rules left after Delete (%v):\n%s", err, out)
	}
}
