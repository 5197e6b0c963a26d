package rules_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/backend/nftables"
	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// TestNetlinkMatchesNft: the nftables backend (netlink, in-process) and
// "nft -f" of rules.Nft must leave the kernel holding the same table, for
// every golden scenario. The IR is the single source of truth; this keeps
// explain honest about what ADD programs, and CHECK must accept it.
func TestNetlinkMatchesNft(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root: it creates network namespaces")
	}
	for i, sc := range rules.Scenarios() {
		t.Run(rules.NameOf(sc), func(t *testing.T) {
			rs := rules.Generate(rules.SpecOf(sc))
			a, b := fmt.Sprintf("mesh-eq-a-%d-%d", os.Getpid(), i), fmt.Sprintf("mesh-eq-b-%d-%d", os.Getpid(), i)
			for _, ns := range []string{a, b} {
				sh(t, nil, "ip", "netns", "add", ns)
				t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
				sh(t, nil, "ip", "-n", ns, "link", "set", "lo", "up")
			}
			if err := nftables.New().Apply("/var/run/netns/"+a, rs); err != nil {
				t.Fatalf("netlink apply: %v", err)
			}
			// CHECK reads back what ADD wrote, expression by expression.
			if err := nftables.New().Check("/var/run/netns/"+a, rs); err != nil {
				t.Errorf("netlink check after apply: %v", err)
			}
			sh(t, []byte(rules.Nft(rs)), "ip", "netns", "exec", b, "nft", "-f", "-")
			got := sh(t, nil, "ip", "netns", "exec", a, "nft", "list", "table", rules.NftFamily, rules.NftTable)
			want := sh(t, nil, "ip", "netns", "exec", b, "nft", "list", "table", rules.NftFamily, rules.NftTable)
			if got != want {
				t.Errorf("netlink backend and rules.Nft differ\nnetlink:\n%s\nnft -f:\n%s", got, want)
			}
		})
	}
}

var handle = regexp.MustCompile(` # handle \d+`)

func sh(t *testing.T, stdin []byte, args ...string) string {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return handle.ReplaceAllString(string(out), "")
}
