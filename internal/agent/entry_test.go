package agent

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/agent/install"
	"github.com/mesh-cni/mesh-cni/internal/config"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// loadSettings builds the entry from the plugin settings at path on every
// pass, as the agent binary does.
func loadSettings(path string) func() ([]byte, error) {
	return func() ([]byte, error) {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		return config.Load(raw, config.HostPaths{Kubeconfig: "/var/lib/mesh-cni/kubeconfig"})
	}
}

// The Node status carries the chain entry in force, compact, and a new
// entry is published when the settings change even though readiness does
// not: "kubectl mesh-cni explain" reads it from there.
func TestPublishesEntryInForce(t *testing.T) {
	root := t.TempDir()
	settings := root + "/plugin.json"
	os.WriteFile(settings, []byte(`{"type":"mesh-cni","backend":"nftables"}`), 0o644)
	f := newFixtureMod(t, root, true, nil, func(c *install.Config, o *Options) {
		c.Entry, c.EntryDir = nil, root
		c.LoadEntry = loadSettings(settings)
	})
	os.WriteFile(f.conf+"/10-kindnet.conflist", fixtureBytes(t, "kindnet-ipv4.conflist"), 0o644)
	f.start(t)

	// published returns the last published entry's logLevel, "" if none.
	published := func() (st Status) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.published) > 0 {
			st = f.published[len(f.published)-1]
		}
		return st
	}
	logLevel := func(st Status) string {
		var e struct {
			Type     string `json:"type"`
			LogLevel string `json:"logLevel"`
		}
		if json.Unmarshal(st.Entry, &e) != nil || e.Type != "mesh-cni" {
			return ""
		}
		return e.LogLevel
	}
	testenv.EventuallyTrue(t, "ready with the entry", func() bool { st := published(); return st.Ready && len(st.Entry) > 0 })
	st := published()
	var back bytes.Buffer
	if err := json.Compact(&back, st.Entry); err != nil || !bytes.Equal(back.Bytes(), st.Entry) {
		t.Errorf("entry not compact JSON (%v): %s", err, st.Entry)
	}
	if _, err := config.Parse(st.Entry); err != nil {
		t.Errorf("published entry does not parse as the plugin's config: %v\n%s", err, st.Entry)
	}
	first := logLevel(st)

	os.WriteFile(settings+".new", []byte(`{"type":"mesh-cni","backend":"nftables","logLevel":"debug"}`), 0o644)
	os.Rename(settings+".new", settings)
	testenv.EventuallyTrue(t, "the new entry published", func() bool { st := published(); return st.Ready && logLevel(st) == "debug" })
	if first == "debug" {
		t.Errorf("first entry already had logLevel debug: %s", st.Entry)
	}
	m, err := os.ReadFile(f.run + "/ready")
	if err != nil || bytes.Contains(m, []byte(`"entry"`)) {
		t.Errorf("the readiness marker carries the entry (%v): %s", err, m)
	}
}
