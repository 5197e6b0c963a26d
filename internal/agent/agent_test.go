package agent

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/mesh-cni/mesh-cni/internal/agent/install"
	"github.com/mesh-cni/mesh-cni/internal/agent/kubeconfig"
	"github.com/mesh-cni/mesh-cni/internal/agent/metrics"
	"github.com/mesh-cni/mesh-cni/internal/config"
	"github.com/mesh-cni/mesh-cni/internal/node"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

type fixture struct {
	root, conf, bin, state, run, token string
	a                                  *Agent
	mu                                 sync.Mutex
	published                          []Status
}

func newFixture(t *testing.T, withKube bool) *fixture {
	t.Helper()
	return newFixtureIn(t, t.TempDir(), withKube, nil)
}

// newFixtureIn builds an agent on the dirs under root (a second agent on
// the same root is a restart); published, when set, is its Node status.
func newFixtureIn(t *testing.T, root string, withKube bool, published *Status) *fixture {
	t.Helper()
	return newFixtureMod(t, root, withKube, published, nil)
}

// newFixtureMod lets a test change the installer's config and the options.
func newFixtureMod(t *testing.T, root string, withKube bool, published *Status, mod func(*install.Config, *Options)) *fixture {
	t.Helper()
	f := &fixture{root: root, conf: root + "/conf", bin: root + "/bin", state: root + "/state", run: root + "/run", token: root + "/sa/token"}
	for _, d := range []string{f.conf, f.bin, f.state, f.run, root + "/sa", root + "/img"} {
		os.MkdirAll(d, 0o755)
	}
	os.WriteFile(root+"/img/mesh-cni", []byte("plugin"), 0o755)
	os.WriteFile(root+"/img/mesh-cni-podget", []byte("podget"), 0o755)
	os.WriteFile(f.token, []byte("tok-1"), 0o600)
	entry, err := config.Load([]byte(`{"type":"mesh-cni"}`), config.HostPaths{Kubeconfig: "/var/lib/mesh-cni/kubeconfig"})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ic := install.Config{BinDir: f.bin, ConfDir: f.conf, StateDir: f.state, PluginBinary: root + "/img/mesh-cni", HelperBinary: root + "/img/mesh-cni-podget",
		Chained: true, Entry: entry, Log: log}
	o := Options{
		Watch:       install.WatchOptions{RetryDelay: 20 * time.Millisecond},
		Kubeconfig:  f.state + "/kubeconfig",
		KubeOpts:    kubeconfig.Options{Host: "10.96.0.1", Port: "443", TokenPath: f.token},
		Marker:      f.run + "/ready",
		Backend:     "nftables",
		Version:     "v-test",
		TokenResync: 50 * time.Millisecond,
		Publish: func(ctx context.Context, st Status) error {
			f.mu.Lock()
			f.published = append(f.published, st)
			f.mu.Unlock()
			return nil
		},
		Log: log,
	}
	if !withKube {
		o.KubeOptsErr = io.ErrUnexpectedEOF
	}
	if published != nil {
		o.Published = func(context.Context) (*Status, error) { return published, nil }
	}
	if mod != nil {
		mod(&ic, &o)
	}
	if o.Installer, err = install.New(ic); err != nil {
		t.Fatal(err)
	}
	f.a = New(o)
	return f
}

func (f *fixture) start(t *testing.T) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.a.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

func fixtureBytes(t *testing.T, name string) []byte {
	b, err := os.ReadFile(filepath.Join("install/testdata/conflists", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestMarkerOnlyWhenEverythingInPlace(t *testing.T) {
	f := newFixture(t, true)
	// A marker from an earlier run must not survive an unchecked start.
	os.WriteFile(f.run+"/ready", []byte(`{"binary":"x","conf":"y"}`), 0o644)
	f.start(t)
	testenv.EventuallyTrue(t, "stale marker removed", func() bool { _, err := os.Stat(f.run + "/ready"); return os.IsNotExist(err) })
	if st := f.a.Status(); st.Ready || !strings.Contains(st.Reason, "no primary CNI config") {
		t.Fatalf("status %+v", st)
	}
	if got := value(metrics.Ready); got != 0 {
		t.Errorf("ready gauge %v", got)
	}
	os.WriteFile(f.conf+"/10-kindnet.conflist", fixtureBytes(t, "kindnet-ipv4.conflist"), 0o644)
	testenv.EventuallyTrue(t, "ready", func() bool { return f.a.Status().Ready })
	m, err := node.ReadMarker(f.run + "/ready")
	if err != nil {
		t.Fatal(err)
	}
	if m.Conf != f.conf+"/10-kindnet.conflist" || m.Binary != f.bin+"/mesh-cni" || m.Kubeconfig != f.state+"/kubeconfig" || m.Backend != "nftables" {
		t.Errorf("marker %+v", m)
	}
	if got := value(metrics.Ready); got != 1 {
		t.Errorf("ready gauge %v", got)
	}
	// The primary config disappears: not ready, marker gone.
	os.Remove(f.conf + "/10-kindnet.conflist")
	testenv.EventuallyTrue(t, "not ready", func() bool { return !f.a.Status().Ready })
	if _, err := os.Stat(f.run + "/ready"); !os.IsNotExist(err) {
		t.Errorf("marker still there: %v", err)
	}
	// Published asynchronously: ready (with the marker's fields), then
	// not ready with a reason.
	testenv.EventuallyTrue(t, "status published", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		var sawReady, sawNotReady bool
		for _, st := range f.published {
			b, _ := json.Marshal(st)
			var back map[string]any
			json.Unmarshal(b, &back)
			if st.Ready {
				sawReady = back["ready"] == true && back["conf"] != "" && back["version"] == "v-test"
			} else if sawReady {
				sawNotReady = back["reason"] != ""
			}
		}
		return sawReady && sawNotReady
	})
}

func TestNotReadyWithoutKubeconfig(t *testing.T) {
	f := newFixture(t, false)
	os.WriteFile(f.conf+"/10-kindnet.conflist", fixtureBytes(t, "kindnet-ipv4.conflist"), 0o644)
	f.start(t)
	testenv.EventuallyTrue(t, "installed", func() bool {
		b, _ := os.ReadFile(f.conf + "/10-kindnet.conflist")
		return strings.Contains(string(b), "mesh-cni")
	})
	// Readiness is decided once both the install pass and the kubeconfig
	// attempt are done: wait for the latter to show in the reason.
	testenv.EventuallyTrue(t, "the kubeconfig in the reason", func() bool { return strings.Contains(f.a.Status().Reason, "kubeconfig") })
	if st := f.a.Status(); st.Ready {
		t.Fatalf("status %+v", st)
	}
	if _, err := os.Stat(f.run + "/ready"); !os.IsNotExist(err) {
		t.Error("marker written without a kubeconfig")
	}
}

func TestTokenRotationAndReadOnlyBinDir(t *testing.T) {
	f := newFixture(t, true)
	os.WriteFile(f.conf+"/10-kindnet.conflist", fixtureBytes(t, "kindnet-ipv4.conflist"), 0o644)
	f.start(t)
	testenv.EventuallyTrue(t, "ready", func() bool { return f.a.Status().Ready })
	os.WriteFile(f.token, []byte("tok-2"), 0o600)
	testenv.EventuallyTrue(t, "token rotated", func() bool { b, _ := os.ReadFile(f.state + "/kubeconfig"); return strings.Contains(string(b), "tok-2") })
	// An empty token (mid-rotation): the last good kubeconfig stays and
	// the node stays ready on it. The failure counter says the agent has
	// read it.
	failures := value(metrics.Installs.WithLabelValues("kubeconfig_failure"))
	os.WriteFile(f.token, nil, 0o600)
	testenv.EventuallyTrue(t, "the empty token read", func() bool {
		return value(metrics.Installs.WithLabelValues("kubeconfig_failure")) > failures
	})
	if b, _ := os.ReadFile(f.state + "/kubeconfig"); !strings.Contains(string(b), "tok-2") {
		t.Error("kubeconfig lost on a bad token")
	}
	if !f.a.Status().Ready {
		t.Errorf("not ready on a failed refresh with a good kubeconfig in place: %+v", f.a.Status())
	}
	// No kubeconfig at all and none can be written: not ready.
	os.Remove(f.state + "/kubeconfig")
	testenv.EventuallyTrue(t, "not ready", func() bool { return !f.a.Status().Ready })
	if _, err := os.Stat(f.run + "/ready"); !os.IsNotExist(err) {
		t.Error("marker kept without a kubeconfig")
	}
	os.WriteFile(f.token, []byte("tok-3"), 0o600)
	testenv.EventuallyTrue(t, "ready again", func() bool { return f.a.Status().Ready })
}

func TestUninstallOrder(t *testing.T) {
	f := newFixture(t, true)
	orig := fixtureBytes(t, "kindnet-ipv4.conflist")
	os.WriteFile(f.conf+"/10-kindnet.conflist", orig, 0o644)
	f.start(t)
	testenv.EventuallyTrue(t, "ready", func() bool { return f.a.Status().Ready })
	// A broken primary at uninstall: the binary must stay, since the
	// config still names it.
	os.WriteFile(f.conf+"/10-kindnet.conflist", append(append([]byte{}, orig...), '}'), 0o644)
	if err := f.a.Uninstall(); err == nil {
		// The install record names the file; it is not valid JSON, so
		// uninstall must refuse to touch it and keep the binary.
		t.Fatal("uninstall of a broken file reported success")
	}
	for _, b := range []string{"/mesh-cni", "/mesh-cni-podget"} {
		if _, err := os.Stat(f.bin + b); err != nil {
			t.Errorf("%s removed while a config may still name the plugin", b)
		}
	}
}

func TestReportSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "report.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeReports(ctx, sock, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	testenv.EventuallyTrue(t, "socket", func() bool { _, err := os.Stat(sock); return err == nil })
	before := value(metrics.PluginDecisions.WithLabelValues("ADD", "failed", "lookup-timeout", "istio"))
	dropped := value(metrics.ReportsDropped)
	fallbacks := value(metrics.BackendFallbacks.WithLabelValues("iptables-legacy"))
	autoFallbacks := value(metrics.BackendFallbacks.WithLabelValues("nftables"))
	c, err := net.Dial("unixgram", sock)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range []node.Event{
		{Command: "ADD", Decision: "failed", Reason: "lookup-timeout", Mesh: "istio", Seconds: 5},
		{Command: "ADD", Decision: "failed", Reason: "lookup-timeout", Mesh: "istio", Seconds: 5},
		{Command: "ADD", Decision: "meshed", Mesh: "istio", Backend: "nftables", Fallback: "iptables-legacy"},
		{Command: "ADD", Decision: "meshed", Mesh: "istio", Backend: "iptables-legacy", Fallback: "nftables"},
		{Command: "DEL", Decision: "deleted", Fallback: "no-such-backend"}, // not a label value
	} {
		b, _ := json.Marshal(ev)
		c.Write(b)
	}
	c.Write([]byte("{not json"))
	c.Write([]byte(`{"cmd":"ADD"}`))
	testenv.EventuallyTrue(t, "events counted", func() bool {
		return value(metrics.PluginDecisions.WithLabelValues("ADD", "failed", "lookup-timeout", "istio")) == before+2 &&
			value(metrics.ReportsDropped) == dropped+2 &&
			value(metrics.BackendFallbacks.WithLabelValues("iptables-legacy")) == fallbacks+1 &&
			value(metrics.BackendFallbacks.WithLabelValues("nftables")) == autoFallbacks+1
	})

	// The histogram is served on /metrics.
	rec := httptest.NewRecorder()
	MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), `mesh_cni_plugin_duration_seconds_bucket{cmd="ADD",decision="failed",le="5"}`) {
		t.Errorf("histogram missing from /metrics")
	}
	if body := rec.Body.String(); !strings.Contains(body, `mesh_cni_backend_fallbacks_total{configured="iptables-legacy"}`) ||
		strings.Contains(body, "no-such-backend") {
		t.Errorf("fallback counter: want the known backends' series only")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestProbes(t *testing.T) {
	f := newFixture(t, true)
	h := f.a.ProbeHandler()
	get := func(p string) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", p, nil))
		return rec.Code
	}
	if get("/healthz") != http.StatusServiceUnavailable || get("/readyz") != http.StatusServiceUnavailable {
		t.Fatal("healthy before running")
	}
	os.WriteFile(f.conf+"/10-kindnet.conflist", fixtureBytes(t, "kindnet-ipv4.conflist"), 0o644)
	f.start(t)
	testenv.EventuallyTrue(t, "ready", func() bool { return get("/readyz") == 200 })
	if get("/healthz") != 200 {
		t.Error("not healthy while running")
	}
}

// value reads a counter or gauge.
func value(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}

// A primary rewriting its file in place (truncate, then write) is seen
// half-written for a moment: that must not flap readiness.
func TestNoFlapWhilePrimaryWrites(t *testing.T) {
	f := newFixtureMod(t, t.TempDir(), true, nil, func(_ *install.Config, o *Options) {
		o.Watch.SettleDelay = 10 * time.Millisecond
	})
	orig := fixtureBytes(t, "calico-manifest-portmap-bandwidth.conflist")
	p := f.conf + "/10-calico.conflist"
	os.WriteFile(p, orig, 0o644)
	f.start(t)
	reports := func() int {
		f.a.mu.Lock()
		defer f.a.mu.Unlock()
		return f.a.reports
	}
	testenv.EventuallyTrue(t, "ready published", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.published) > 0 && f.published[len(f.published)-1].Ready
	})
	f.mu.Lock()
	before := len(f.published)
	f.mu.Unlock()
	for i := 0; i < 50; i++ {
		os.WriteFile(p, orig[:len(orig)/2], 0o644) // half-written
		// The agent has looked at the half-written file: a pass may have
		// been under way while the file was being written, but the one
		// after it started once the write was done.
		r0 := reports()
		testenv.EventuallyTrue(t, "two passes over the half-written file", func() bool { return reports() >= r0+2 })
		if !f.a.Status().Ready {
			t.Fatalf("not ready while the primary was mid-write: %s", f.a.Status().Reason)
		}
		os.WriteFile(p, orig, 0o644)
		testenv.EventuallyTrue(t, "re-chained", func() bool { b, _ := os.ReadFile(p); return strings.Contains(string(b), "mesh-cni") })
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.published) != before {
		t.Errorf("%d status updates published during rewrites", len(f.published)-before)
	}
}

// readEntryFrom makes c read its chain entry from the settings file on
// every pass, as the agent reads the chart's plugin settings, and watch dir
// (the file's) for its changes.
func readEntryFrom(c *install.Config, dir, settings string) {
	c.Entry, c.EntryDir = nil, dir
	c.LoadEntry = func() ([]byte, error) {
		raw, err := os.ReadFile(settings)
		if err != nil {
			return nil, err
		}
		return config.Load(raw, config.HostPaths{Kubeconfig: "/var/lib/mesh-cni/kubeconfig"})
	}
}
