package agent

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/agent/install"
	"github.com/mesh-cni/mesh-cni/internal/node"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// A bad value in the chart's plugin settings: the agent keeps the entry it
// chained last, goes not-ready with the key named, publishes the reason and
// warns once.
func TestBadEntryKeepsLastGoodAndReports(t *testing.T) {
	root := t.TempDir()
	settings := root + "/plugin.json"
	os.WriteFile(settings, []byte(`{"type":"mesh-cni","backend":"nftables"}`), 0o644)
	var mu sync.Mutex
	var warned []string
	f := newFixtureMod(t, root, true, nil, func(c *install.Config, o *Options) {
		c.Entry = nil
		c.EntryDir = root
		c.LoadEntry = loadSettings(settings)
		o.Event = func(typ, reason, msg string) {
			if typ != EventWarning {
				return
			}
			mu.Lock()
			warned = append(warned, reason+": "+msg)
			mu.Unlock()
		}
	})
	primary := f.conf + "/10-kindnet.conflist"
	os.WriteFile(primary, fixtureBytes(t, "kindnet-ipv4.conflist"), 0o644)
	f.start(t)
	testenv.EventuallyTrue(t, "ready", func() bool { return f.a.Status().Ready })
	good, _ := os.ReadFile(primary)

	// Replaced whole, as kubelet updates a ConfigMap volume.
	put := func(s string) {
		os.WriteFile(settings+".new", []byte(s), 0o644)
		os.Rename(settings+".new", settings)
	}
	put(`{"type":"mesh-cni","backend":"nft","meshes":{"istio":{"proxyUID":-5}}}`)
	testenv.EventuallyTrue(t, "not ready", func() bool { return !f.a.Status().Ready })
	st := f.a.Status()
	if !strings.Contains(st.Reason, `invalid backend "nft"`) || !strings.Contains(st.Reason, "previous entry") {
		t.Errorf("reason %q does not name the bad value and what stays", st.Reason)
	}
	// The kept entry still serves ADD: the marker STATUS reads stays.
	if m, err := node.ReadMarker(f.run + "/ready"); err != nil || m.Conf != primary {
		t.Errorf("readiness marker while the kept entry serves pods: %+v, %v", m, err)
	}
	rec := httptest.NewRecorder()
	f.a.ProbeHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	body, _ := io.ReadAll(rec.Body)
	if rec.Code != http.StatusServiceUnavailable || !bytes.Contains(body, []byte(`"nft"`)) {
		t.Errorf("/readyz: %d %s", rec.Code, body)
	}
	testenv.EventuallyTrue(t, "published reason", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		p := f.published[len(f.published)-1]
		return !p.Ready && p.Reason == st.Reason
	})
	if now, _ := os.ReadFile(primary); !bytes.Equal(now, good) {
		t.Errorf("chain changed:\n%s\nwas\n%s", now, good)
	}
	mu.Lock()
	if len(warned) != 1 || !strings.HasPrefix(warned[0], ReasonRefused+": ") {
		t.Errorf("warnings: %q", warned)
	}
	mu.Unlock()

	// Fixed: ready again, chained with the new entry.
	put(`{"type":"mesh-cni","backend":"nftables","logLevel":"debug"}`)
	testenv.EventuallyTrue(t, "ready again", func() bool { return f.a.Status().Ready })
	if now, _ := os.ReadFile(primary); !bytes.Contains(now, []byte(`"logLevel": "debug"`)) {
		t.Errorf("new entry not chained:\n%s", now)
	}
}
