package rules

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestRenderingsLoad loads every golden scenario into a throwaway network
// namespace with the real tools: iptables-restore --test, then for real
// (iptables-nft and iptables-legacy, each family), nft -c and nft -f, and
// checks the kernel holds exactly the rules we rendered.
func TestRenderingsLoad(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root: it creates network namespaces and loads rules")
	}
	for _, tool := range []string{"ip", "nft", "iptables-nft-restore", "ip6tables-nft-restore", "iptables-legacy-restore", "ip6tables-legacy-restore"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found (make deps installs iptables, nftables, iproute2): %v", tool, err)
		}
	}
	for i, sc := range scenarios() {
		rs := Generate(sc.spec)
		for _, variant := range []string{"nft", "legacy"} {
			for _, fam := range []Family{IPv4, IPv6} {
				in := IptablesRestore(rs, fam)
				if in == "" {
					continue
				}
				prog := "iptables"
				if fam == IPv6 {
					prog = "ip6tables"
				}
				t.Run(fmt.Sprintf("%s/%s-%s", sc.name, prog, variant), func(t *testing.T) {
					ns := netns(t, fmt.Sprintf("mesh-rules-%d-%d", os.Getpid(), i))
					run(t, in, "ip", "netns", "exec", ns, prog+"-"+variant+"-restore", "--noflush", "--test")
					run(t, in, "ip", "netns", "exec", ns, prog+"-"+variant+"-restore", "--noflush")
					saved := run(t, "", "ip", "netns", "exec", ns, prog+"-"+variant+"-save")
					if want, got := strings.Count(in, "\n-A "), strings.Count(saved, "mesh-cni/"); got != want {
						t.Errorf("kernel holds %d of our rules, rendered %d:\n%s", got, want, saved)
					}
				})
			}
		}
		t.Run(sc.name+"/nft", func(t *testing.T) {
			ns := netns(t, fmt.Sprintf("mesh-rules-%d-%d", os.Getpid(), i))
			script := Nft(rs)
			run(t, script, "ip", "netns", "exec", ns, "nft", "-c", "-f", "-")
			run(t, script, "ip", "netns", "exec", ns, "nft", "-f", "-")
			run(t, script, "ip", "netns", "exec", ns, "nft", "-f", "-") // re-apply replaces
			listed := run(t, "", "ip", "netns", "exec", ns, "nft", "list", "table", NftFamily, NftTable)
			if want, got := strings.Count(script, "comment \"mesh-cni/"), strings.Count(listed, "comment \"mesh-cni/"); got != want {
				t.Errorf("kernel holds %d of our rules, rendered %d:\n%s", got, want, listed)
			}
		})
	}
}

func netns(t *testing.T, name string) string {
	t.Helper()
	run(t, "", "ip", "netns", "add", name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	return name
}

func run(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v: %s\ninput:\n%s", strings.Join(args, " "), err, errb.String(), stdin)
	}
	return out.String()
}
