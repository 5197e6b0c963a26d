package testenv

import (
	"os"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	gnft "github.com/google/nftables"
)

// DeleteNftRule removes the index-th rule (as the kernel lists it) of chain
// in the inet table in netns n, as an outside writer would: the tests of
// CHECK and of the agent's repair use it to break what the plugin wrote.
func DeleteNftRule(t testing.TB, n ns.NetNS, table, chain string, index int) {
	t.Helper()
	f, err := os.Open(n.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := gnft.New(gnft.WithNetNSFd(int(f.Fd())))
	if err != nil {
		t.Fatalf("nftables connection in %s: %v", n.Path(), err)
	}
	tb := &gnft.Table{Name: table, Family: gnft.TableFamilyINet}
	krs, err := c.GetRules(tb, &gnft.Chain{Name: chain, Table: tb})
	if err != nil || len(krs) <= index {
		t.Fatalf("rules of %s: %v (%d)", chain, err, len(krs))
	}
	if err := c.DelRule(krs[index]); err != nil {
		t.Fatalf("delete rule %d of %s: %v", index, chain, err)
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("delete rule %d of %s: %v", index, chain, err)
	}
}
