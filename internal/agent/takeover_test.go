package agent

import (
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-cni/mesh-cni/internal/agent/install"
	"github.com/mesh-cni/mesh-cni/internal/agent/metrics"
	"github.com/mesh-cni/mesh-cni/internal/node"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// The Node status and the metrics say "taking over from istio-cni" while
// the agent replaces it, then "took over" once no re-insert came for the
// quiet period; the node stays ready throughout.
func TestTakeoverStatusAndMetrics(t *testing.T) {
	f := newFixtureMod(t, t.TempDir(), true, nil, func(c *install.Config, o *Options) {
		c.MigrateFrom = "istio-cni"
		o.Watch.TakeoverQuiet = 300 * time.Millisecond
	})
	list := strings.Replace(string(fixtureBytes(t, "kindnet-ipv4.conflist")), "\n\t]\n}",
		",\n\t{\"type\": \"istio-cni\", \"name\": \"istio-cni\"}\n\t]\n}", 1)
	if !strings.Contains(list, "istio-cni") {
		t.Fatal("fixture not extended")
	}
	os.WriteFile(f.conf+"/10-kindnet.conflist", []byte(list), 0o644)
	replaced0 := value(metrics.TakeoverReplaced.WithLabelValues("istio-cni"))
	f.start(t)
	phases := func() []string {
		f.mu.Lock()
		defer f.mu.Unlock()
		var out []string
		for _, st := range f.published {
			if st.Ready {
				out = append(out, takeoverPhase(st.Takeover))
			}
		}
		return out
	}
	testenv.EventuallyTrue(t, "ready, taking over", func() bool {
		p := phases()
		return len(p) > 0 && p[0] == "taking over from istio-cni"
	})
	if value(metrics.TakeoverReplaced.WithLabelValues("istio-cni"))-replaced0 != 1 {
		t.Error("mesh_cni_agent_takeover_replaced_total did not count the replaced entry")
	}
	testenv.EventuallyTrue(t, "took over", func() bool {
		p := phases()
		return p[len(p)-1] == "took over from istio-cni"
	})
	if g := value(metrics.Takeover.WithLabelValues("istio-cni")); g != 0 {
		t.Errorf("mesh_cni_agent_takeover %v after the takeover, want 0", g)
	}
	b, _ := os.ReadFile(f.conf + "/10-kindnet.conflist")
	if strings.Contains(string(b), "istio-cni") || !strings.Contains(string(b), "mesh-cni") {
		t.Errorf("conflist:\n%s", b)
	}
}

// With handBackTo the Node status names the plugin the node went back to
// once its entry is in and ours out; the agent stays ready.
func TestHandBackStatus(t *testing.T) {
	f := newFixtureMod(t, t.TempDir(), true, nil, func(c *install.Config, o *Options) {
		c.HandBackTo = "istio-cni"
	})
	list := strings.Replace(string(fixtureBytes(t, "kindnet-ipv4.conflist")), "\n\t]\n}",
		",\n\t{\"type\": \"istio-cni\", \"name\": \"istio-cni\"}\n\t]\n}", 1)
	os.WriteFile(f.conf+"/10-kindnet.conflist", []byte(list), 0o644)
	f.start(t)
	testenv.EventuallyTrue(t, "ready, handed back to istio-cni", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, st := range f.published {
			if st.Ready && st.HandedBack == "istio-cni" {
				return true
			}
		}
		return false
	})
	b, _ := os.ReadFile(f.conf + "/10-kindnet.conflist")
	if !strings.Contains(string(b), "istio-cni") || strings.Contains(string(b), "mesh-cni") {
		t.Errorf("conflist:\n%s", b)
	}
}

// Without migrateFrom, istio-cni's entry stays and ours is chained after
// it: the node stays ready, its Node status names istio-cni and a Warning
// Event says what that does and the fix, once; when istio-cni's entry
// goes, the status drops it.
func TestOtherMeshStatusAndEvent(t *testing.T) {
	var mu sync.Mutex
	var warned []string
	f := newFixtureMod(t, t.TempDir(), true, nil, func(c *install.Config, o *Options) {
		o.Watch.Resync = 20 * time.Millisecond // passes that change nothing must not repeat the Event
		o.Event = func(typ, reason, msg string) {
			if typ == EventWarning {
				mu.Lock()
				warned = append(warned, reason+": "+msg)
				mu.Unlock()
			}
		}
	})
	plain := string(fixtureBytes(t, "kindnet-ipv4.conflist"))
	withIstio := strings.Replace(plain, "\n\t]\n}", ",\n\t{\"type\": \"istio-cni\", \"name\": \"istio-cni\"}\n\t]\n}", 1)
	primary := f.conf + "/10-kindnet.conflist"
	os.WriteFile(primary, []byte(withIstio), 0o644)
	f.start(t)
	last := func() Status {
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.published) == 0 {
			return Status{}
		}
		return f.published[len(f.published)-1]
	}
	testenv.EventuallyTrue(t, "ready, istio-cni published", func() bool {
		st := last()
		return st.Ready && slices.Equal(st.Others, []string{"istio-cni"})
	})
	testenv.EventuallyTrue(t, "passes after the first", func() bool { f.a.mu.Lock(); defer f.a.mu.Unlock(); return f.a.passes > 5 })
	mu.Lock()
	if len(warned) != 1 || !strings.HasPrefix(warned[0], ReasonOtherMesh+": istio-cni is chained beside mesh-cni in "+primary) ||
		!strings.Contains(warned[0], node.OtherMeshEffect) || !strings.Contains(warned[0], "--set migrateFrom=istio-cni") {
		t.Errorf("warnings: %q", warned)
	}
	mu.Unlock()

	// Istio's entry goes (its installer uninstalled): the status says so.
	b, _ := os.ReadFile(primary)
	os.WriteFile(primary+".tmp", []byte(strings.Replace(string(b), ",\n\t{\"type\": \"istio-cni\", \"name\": \"istio-cni\"}", "", 1)), 0o644)
	os.Rename(primary+".tmp", primary)
	testenv.EventuallyTrue(t, "istio-cni gone from the status", func() bool {
		st := last()
		return st.Ready && len(st.Others) == 0
	})
}
