package docs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/mesh"
	"github.com/mesh-cni/mesh-cni/internal/rules"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// The defaults and bounds the prose states are the Go owners' (the
// profiles in internal/mesh, the bounds, the TPROXY mark): each phrase is built
// from the owner and must appear in the file as written.
func TestDefaultsInProse(t *testing.T) {
	root := testenv.RepoRoot(t)
	p := func(name string) mesh.Config {
		c, err := mesh.Defaults(name)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	l, i, k := p(mesh.Linkerd), p(mesh.Istio), p(mesh.Kuma)
	phrases := map[string][]string{
		"docs/linkerd.md": {
			fmt.Sprintf("| `inboundProxyPort` | `meshes.linkerd.inboundPort` | default %d |", l.InboundPort),
			fmt.Sprintf("| `outboundProxyPort` | `meshes.linkerd.outboundPort` | default %d |", l.OutboundPort),
			fmt.Sprintf("| `proxyUID` | `meshes.linkerd.proxyUID` | default %d |", *l.ProxyUID),
			fmt.Sprintf("(`proxyControlPort` %s, `proxyAdminPort` %s)", l.IgnoreInbound[0], l.IgnoreInbound[1]),
		},
		"docs/topics.md": {
			fmt.Sprintf("(Linkerd %d, Istio %d, or the `proxyUID` you", *l.ProxyUID, *i.ProxyUID),
			fmt.Sprintf("Istio's agent answers on %d", i.DNSPort),
			fmt.Sprintf("packets marked %d are looked up in table %d", rules.TProxyMark, rules.RouteTable),
		},
		"docs/istio.md": {
			fmt.Sprintf("Where every proxy runs as %d,", *i.ProxyUID),
			fmt.Sprintf("proxy UID/GID %d/%d, inbound port %d, outbound %d", *i.ProxyUID, *i.ProxyGID, i.InboundPort, i.OutboundPort),
		},
		"docs/upgrade.md": {
			fmt.Sprintf("`meshes.linkerd.proxyUID: %d`", *l.ProxyUID),
		},
		"internal/mesh/README.md": {
			fmt.Sprintf("Linkerd's proxy runs as `proxy.uid` %d", *l.ProxyUID),
			fmt.Sprintf("1 to %d with start ≤ end", mesh.MaxPort),
			fmt.Sprintf("**added** to %s", strings.Join(i.IgnoreInbound, ",")),
			fmt.Sprintf("| `istio-proxy` `runAsUser`/`runAsGroup` (spec known, non-zero) | %d/%d |", *i.ProxyUID, *i.ProxyGID),
			fmt.Sprintf("| `proxyUID` (%d) |", *k.ProxyUID),
			fmt.Sprintf("| `inboundPort` (%d) |", k.InboundPort),
			fmt.Sprintf("| `outboundPort` (%d) |", k.OutboundPort),
			fmt.Sprintf("| `dnsPort` (%d) |", k.DNSPort),
			fmt.Sprintf("| `kuma-sidecar` `runAsUser`/`runAsGroup` (spec known) | %d/%d |", *k.ProxyUID, *k.ProxyGID),
		},
	}
	for file, want := range phrases {
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Join(strings.Fields(string(b)), " ")
		for _, w := range want {
			if !strings.Contains(text, strings.Join(strings.Fields(w), " ")) {
				t.Errorf("%s does not say %q (the Go default or bound)", file, w)
			}
		}
	}
}
