package agent

import (
	"os"
	"testing"
	"time"

	"github.com/mesh-cni/mesh-cni/internal/node"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// The ready time says since when pods on the node start meshed. A restart
// (rolling update) into the same state keeps it; only a real transition to
// ready sets a new one.
func TestReadyTimeAcrossRestarts(t *testing.T) {
	old := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	type run struct {
		name string
		// prepare changes what the first run left before the restart.
		prepare   func(f *fixture, m *node.Marker) *Status
		keepsTime bool
	}
	for _, c := range []run{
		{"marker left, same state", func(f *fixture, m *node.Marker) *Status { return nil }, true},
		{"marker gone (reboot), Node status same state", func(f *fixture, m *node.Marker) *Status {
			os.Remove(f.run + "/ready")
			return &Status{Marker: *m, Ready: true}
		}, true},
		{"marker gone, no Node status", func(f *fixture, m *node.Marker) *Status {
			os.Remove(f.run + "/ready")
			return nil
		}, false},
		{"marker gone, Node status not ready", func(f *fixture, m *node.Marker) *Status {
			os.Remove(f.run + "/ready")
			return &Status{Marker: *m, Ready: false, Reason: "x"}
		}, false},
		{"marker for another primary config", func(f *fixture, m *node.Marker) *Status {
			m.Conf = f.conf + "/05-other.conflist"
			node.WriteMarker(f.run+"/ready", m)
			return nil
		}, false},
		{"marker for another kubeconfig", func(f *fixture, m *node.Marker) *Status {
			m.Kubeconfig = "/elsewhere"
			node.WriteMarker(f.run+"/ready", m)
			return nil
		}, false},
		{"marker without time", func(f *fixture, m *node.Marker) *Status {
			m.Time = time.Time{}
			node.WriteMarker(f.run+"/ready", m)
			return nil
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			f := newFixtureIn(t, root, true, nil)
			os.WriteFile(f.conf+"/10-kindnet.conflist", fixtureBytes(t, "kindnet-ipv4.conflist"), 0o644)
			stop := f.start(t)
			testenv.EventuallyTrue(t, "ready", func() bool { return f.a.Status().Ready })
			stop()
			// Age the first run's ready time so a new one is told apart.
			m, err := node.ReadMarker(f.run + "/ready")
			if err != nil {
				t.Fatalf("marker after a stop: %v", err)
			}
			m.Time = old
			if err := node.WriteMarker(f.run+"/ready", m); err != nil {
				t.Fatal(err)
			}
			published := c.prepare(f, m)

			f2 := newFixtureIn(t, root, true, published)
			f2.start(t)
			testenv.EventuallyTrue(t, "ready after restart", func() bool { return f2.a.Status().Ready })
			st := f2.a.Status()
			m2, err := node.ReadMarker(f2.run + "/ready")
			if err != nil {
				t.Fatal(err)
			}
			if !m2.Time.Equal(st.Time) {
				t.Errorf("marker time %v, status time %v", m2.Time, st.Time)
			}
			if kept := st.Time.Equal(old); kept != c.keepsTime {
				t.Errorf("ready time %v (earlier %v): kept=%v, want %v", st.Time, old, kept, c.keepsTime)
			}
			if !c.keepsTime && time.Since(st.Time) > time.Minute {
				t.Errorf("new ready time %v is not now", st.Time)
			}
			testenv.EventuallyTrue(t, "published", func() bool {
				f2.mu.Lock()
				defer f2.mu.Unlock()
				for _, p := range f2.published {
					if p.Ready && p.Time.Equal(st.Time) {
						return true
					}
				}
				return false
			})
		})
	}
}

// Within one run, not ready and back is a real transition: a new time.
func TestReadyTimeMovesOnRealTransition(t *testing.T) {
	f := newFixture(t, true)
	primary := f.conf + "/10-kindnet.conflist"
	os.WriteFile(primary, fixtureBytes(t, "kindnet-ipv4.conflist"), 0o644)
	f.start(t)
	testenv.EventuallyTrue(t, "ready", func() bool { return f.a.Status().Ready })
	first := f.a.Status().Time
	time.Sleep(1100 * time.Millisecond) // the time has one-second resolution
	os.Remove(primary)
	testenv.EventuallyTrue(t, "not ready", func() bool { return !f.a.Status().Ready })
	os.WriteFile(primary, fixtureBytes(t, "kindnet-ipv4.conflist"), 0o644)
	testenv.EventuallyTrue(t, "ready again", func() bool { return f.a.Status().Ready })
	if again := f.a.Status().Time; !again.After(first) {
		t.Errorf("ready time after not-ready %v, before %v", again, first)
	}
}
