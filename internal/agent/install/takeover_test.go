package install

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// The entries the other meshes' installers write. Istio: the fields of
// plugin.Config as createCNIConfigFile marshals them, cniVersion dropped
// by insertCNIConfig (istio.io/istio cni/pkg/install/cniconfig.go:35-61,
// 241-259; cni/pkg/install/testdata/list.conflist.golden). Linkerd: the
// linkerd2-cni chart's cni_network_config with its defaults (linkerd/linkerd2
// charts/linkerd2-cni/templates/cni-plugin.yaml:156-184 @ b24cd40), as
// linkerd2-proxy-init's installer injects it (internal/cni/testdata/
// 10-calico-linkerd.conflist @ 183e791).
const (
	istioEntry = `{"ambient_enabled": false, "cni_agent_run_dir": "/var/run/istio-cni", "dns": {},
 "enable_ambient_detection_retry": false, "enablement_selectors": [], "exclude_namespaces": ["kube-system"],
 "ipam": {}, "name": "istio-cni", "native_nftables": false, "plugin_log_level": "info",
 "pod_namespace": "istio-system", "type": "istio-cni"}`
	linkerdEntry = `{"name": "linkerd-cni", "type": "linkerd-cni", "log_level": "info",
 "kubernetes": {"kubeconfig": "/etc/cni/net.d/ZZZ-linkerd-cni-kubeconfig"},
 "linkerd": {"incoming-proxy-port": 4143, "outgoing-proxy-port": 4140, "proxy-uid": 2102,
  "ports-to-redirect": [], "inbound-ports-to-ignore": ["4191", "4190"], "simulate": false,
  "use-wait-flag": false, "iptables-mode": "nft", "ipv6": false}}`
)

// injectEntry does what both installers do to a conflist: decode it into
// a map, drop their entry, append it last and re-encode with two-space
// indent (Istio: cniconfig.go:275-291 and util.MarshalCNIConfig,
// cni/pkg/util/pluginutil.go:137-143; Linkerd: internal/cni/conf.go:283-302).
func injectEntry(t testing.TB, conflist []byte, entry string) []byte {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(conflist, &doc); err != nil {
		t.Errorf("rewriter: %v", err)
		return nil
	}
	var e map[string]any
	if err := json.Unmarshal([]byte(entry), &e); err != nil {
		t.Fatal(err)
	}
	plugins, _ := doc["plugins"].([]any)
	plugins = slices.DeleteFunc(plugins, func(p any) bool { return p.(map[string]any)["type"] == e["type"] })
	doc["plugins"] = append(plugins, e)
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(out, '\n')
}

func hasType(t testing.TB, conflist []byte, typ string) bool {
	types, err := pluginTypes(conflist)
	if err != nil {
		t.Errorf("%v: %s", err, conflist)
	}
	return slices.Contains(types, typ)
}

// istioInstaller re-inserts istio-cni as Istio's install-cni does while
// its DaemonSet runs: a fresh watch of the conf dir, then if the primary
// lacks the istio-cni entry, insert it and write the file atomically
// (temp "<name>.tmp.*" then rename: pkg/file/file.go AtomicWrite);
// otherwise wait for the next change (cni/pkg/install/install.go:104-128
// Run, 200-255 sleepWatchInstall, 367-370 the istio-cni check). Between
// installs it throttles as installationThrottle does (install.go:447-470:
// once per 5s, waiting at most 1s), scaled down by 50.
func istioInstaller(t testing.TB, path string, stop <-chan struct{}, inserts *atomic.Int64) {
	const window, maxWait = 100 * time.Millisecond, 20 * time.Millisecond
	var last time.Time
	for {
		if d := window - time.Since(last); d > 0 {
			time.Sleep(min(d, maxWait))
		}
		last = time.Now()
		w, err := fsnotify.NewWatcher()
		if err != nil {
			t.Error(err)
			return
		}
		if err := w.Add(filepath.Dir(path)); err != nil {
			t.Error(err)
		}
		data, err := os.ReadFile(path)
		if err == nil && !hasType(t, data, "istio-cni") {
			out := injectEntry(t, data, istioEntry)
			tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp.")
			if err != nil {
				t.Error(err)
				w.Close()
				return
			}
			tmp.Write(out)
			tmp.Close()
			if err := os.Rename(tmp.Name(), path); err != nil {
				t.Error(err)
			}
			inserts.Add(1)
			w.Close()
			continue
		}
		select {
		case <-w.Events:
		case <-stop:
			w.Close()
			return
		}
		w.Close()
	}
}

// linkerdInstaller is linkerd2-proxy-init's Go installer: on every
// Create/Write/Rename in the conf dir it re-injects its entry unless the
// file hashes as what it wrote last, writing "<name>.install" and
// renaming it over (internal/cni/run.go:30-40, conf.go:190-240). It
// answers every write of ours with one of its own.
func linkerdInstaller(t testing.TB, path string, stop <-chan struct{}, inserts *atomic.Int64) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Error(err)
		return
	}
	defer w.Close()
	if err := w.Add(filepath.Dir(path)); err != nil {
		t.Error(err)
	}
	var lastHash [32]byte
	patch := func() {
		data, err := os.ReadFile(path)
		if err != nil || sha256.Sum256(data) == lastHash {
			return
		}
		out := injectEntry(t, data, linkerdEntry)
		tmp := path + ".install"
		if err := os.WriteFile(tmp, out, 0o644); err != nil {
			t.Error(err)
			return
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Error(err)
		}
		lastHash = sha256.Sum256(out)
		if !bytes.Equal(out, data) {
			inserts.Add(1)
		}
	}
	patch()
	for {
		select {
		case ev := <-w.Events:
			if ev.Name == path && ev.Op&(fsnotify.Create|fsnotify.Write|fsnotify.Rename) != 0 {
				patch()
			}
		case <-stop:
			return
		}
	}
}

// sample reads the primary as fast as it can, as a runtime loading it for
// a new pod would, and counts what each read held.
type sample struct {
	reads, invalid, neither, both int
	maxBoth                       time.Duration // longest run of reads holding both entries
}

func sampleFile(t testing.TB, path, theirs string, stop <-chan struct{}) *sample {
	s := &sample{}
	var bothSince time.Time
	for {
		select {
		case <-stop:
			return s
		default:
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("read %s: %v", path, err)
			return s
		}
		s.reads++
		var v map[string]any
		if json.Unmarshal(data, &v) != nil {
			s.invalid++
			continue
		}
		ours, them := hasType(t, data, "mesh-cni"), hasType(t, data, theirs)
		switch {
		case !ours && !them:
			s.neither++
		case ours && them:
			s.both++
			if bothSince.IsZero() {
				bothSince = time.Now()
			}
			s.maxBoth = max(s.maxBoth, time.Since(bothSince))
			continue
		}
		bothSince = time.Time{}
	}
}

// takeover runs the agent in migrate mode against a live installer of the
// other mesh that keeps re-inserting its entry, until that installer has
// re-inserted `rounds` times; then the installer stops (its DaemonSet is
// deleted) and the agent must report the takeover done.
func takeover(t *testing.T, from string, installer func(testing.TB, string, <-chan struct{}, *atomic.Int64), rounds int64, opts WatchOptions) (*sample, []State, string) {
	logs := &testenv.Buffer{}
	e := newEnv(t, func(c *Config) {
		c.MigrateFrom = from
		c.Log = slog.New(slog.NewTextHandler(logs, nil))
	})
	entry := istioEntry
	if from == "linkerd-cni" {
		entry = linkerdEntry
	}
	// The node as the other mesh left it: its entry chained last.
	path := e.put(t, "10-kindnet.conflist", injectEntry(t, fixture(t, "kindnet-ipv4.conflist"), entry))

	stopInst, stopSample := make(chan struct{}), make(chan struct{})
	var inserts atomic.Int64
	instDone := make(chan struct{})
	go func() { defer close(instDone); installer(t, path, stopInst, &inserts) }()
	sampled := make(chan *sample)
	go func() { sampled <- sampleFile(t, path, from, stopSample) }()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var states []State
	runDone := make(chan struct{})
	go func() {
		defer close(runDone)
		if err := e.in.Run(ctx, opts, func(s State) {
			mu.Lock()
			states = append(states, s)
			mu.Unlock()
		}); err != nil {
			t.Error(err)
		}
	}()
	testenv.EventuallyTrue(t, "the other installer re-inserts its entry", func() bool { return inserts.Load() >= rounds })
	close(stopInst)
	<-instDone
	testenv.EventuallyTrue(t, "the takeover is reported done", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(states) > 0 && states[len(states)-1].Takeover.Done
	})
	close(stopSample)
	s := <-sampled
	cancel()
	<-runDone

	final := e.read(t, "10-kindnet.conflist")
	loadChained(t, path)
	if hasType(t, final, from) {
		t.Errorf("after the takeover the primary still holds %s:\n%s", from, final)
	}
	if s.invalid > 0 || s.neither > 0 {
		t.Errorf("%d reads: %d not valid JSON, %d with neither plugin (a pod would start unredirected)", s.reads, s.invalid, s.neither)
	}
	if strings.Contains(logs.String(), "keeps removing mesh-cni") {
		t.Errorf("the takeover was flagged as a fight:\n%s", logs)
	}
	mu.Lock()
	defer mu.Unlock()
	last := states[len(states)-1].Takeover
	if last.From != from || last.Replaced < int(inserts.Load()) || !strings.HasPrefix(last.String(), "took over from "+from) {
		t.Errorf("takeover %+v (%q) after %d re-inserts", last, last.String(), inserts.Load())
	}
	for _, st := range states {
		if st.Err != nil {
			t.Errorf("pass failed: %v", st.Err)
		}
	}
	t.Logf("%s: %d re-inserts, %d takeover writes; %d reads of the primary: %d with both entries (longest %v), 0 with neither",
		from, inserts.Load(), last.Replaced, s.reads, s.both, s.maxBoth)
	return s, states, logs.String()
}

// Istio's install-cni keeps running and re-inserts istio-cni after every
// write of ours; each pass replaces it again, in one write, and no read of
// the primary ever finds neither plugin.
//
// The file watch is what answers a re-insert: no periodic pass runs during
// the test (Resync longer than any test), and the only timer left is the
// takeover's quiet check, 2 s after the last replacement. So a watch that
// missed re-inserts would leave both entries in place for up to 2 s each,
// while the watch replaces them within milliseconds (at most about 250 ms
// measured at a load of 16 on 2 cores); the bound sits between the two.
func TestTakeoverFromLiveIstioInstaller(t *testing.T) {
	const quiet = 2 * time.Second
	s, _, _ := takeover(t, "istio-cni", istioInstaller, 20, WatchOptions{
		Resync: time.Hour, RetryDelay: 20 * time.Millisecond,
		TakeoverQuiet: quiet, FightCount: 3,
		// The defaults (20 in 10s) scaled as the installer's throttle is.
		TakeoverBurst: 20, TakeoverWindow: 200 * time.Millisecond,
	})
	if s.maxBoth >= testenv.Scale(quiet/2) {
		t.Errorf("a re-insert of istio-cni stayed %v before the agent replaced it: not the file watch", s.maxBoth)
	}
}

// Linkerd's installer answers every write of ours at once: without a
// bound the two would rewrite the file as fast as the disk allows. The
// takeover writes stay within the burst per window.
func TestTakeoverFromLiveLinkerdInstallerIsBounded(t *testing.T) {
	const burst, window = 5, 200 * time.Millisecond
	start := time.Now()
	_, states, logs := takeover(t, "linkerd-cni", linkerdInstaller, 30, WatchOptions{
		Resync: time.Second, RetryDelay: 20 * time.Millisecond,
		TakeoverQuiet: 300 * time.Millisecond, FightCount: 3,
		TakeoverBurst: burst, TakeoverWindow: window,
	})
	elapsed := time.Since(start)
	writes := 0
	for _, st := range states {
		if st.Replaced > 0 {
			writes++
		}
	}
	if limit := burst * (int(elapsed/window) + 1); writes > limit {
		t.Errorf("%d takeover writes in %v; the bound allows %d", writes, elapsed, limit)
	}
	if !strings.Contains(logs, "holding off") {
		t.Errorf("the ping-pong never reached the bound; logs:\n%s", logs)
	}
}

// One pass takes theirs out and puts ours in with one write; the backup
// (what uninstall restores) holds neither.
func TestMigrateFromReplacesInOneWrite(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MigrateFrom = "istio-cni" })
	path := e.put(t, "10-kindnet.conflist", injectEntry(t, fixture(t, "kindnet-ipv4.conflist"), istioEntry))
	before, _ := os.Stat(path)
	if _, err := e.in.InstallBinary(); err != nil {
		t.Fatal(err)
	}
	res, err := e.in.Reconcile()
	if err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(path)
	if !res.Wrote || res.Replaced != 1 || res.Rechained || os.SameFile(before, after) {
		t.Errorf("result %+v; want one new file (rename) replacing one entry", res)
	}
	got := e.read(t, "10-kindnet.conflist")
	loadChained(t, path)
	if hasType(t, got, "istio-cni") {
		t.Errorf("istio-cni still chained:\n%s", got)
	}
	backup, err := e.in.readBackup("10-kindnet.conflist")
	if err != nil || hasType(t, backup, "istio-cni") || hasType(t, backup, "mesh-cni") {
		t.Errorf("backup %s (%v)", backup, err)
	}
	if res, err := e.in.Reconcile(); err != nil || res.Wrote {
		t.Errorf("second pass %+v %v: want no write", res, err)
	}
}

// Without the mode the other mesh's entry stays and ours is appended after
// it: both plugins run for every pod. The result names it (the agent logs
// a warning that says how to switch).
func TestOtherMeshKeptWithoutMigrateFrom(t *testing.T) {
	for _, c := range []struct{ typ, entry string }{{"istio-cni", istioEntry}, {"linkerd-cni", linkerdEntry}} {
		e := newEnv(t, nil)
		path := e.put(t, "10-kindnet.conflist", injectEntry(t, fixture(t, "kindnet-ipv4.conflist"), c.entry))
		if _, err := e.in.InstallBinary(); err != nil {
			t.Fatal(err)
		}
		res, err := e.in.Reconcile()
		if err != nil {
			t.Fatal(err)
		}
		loadChained(t, path)
		types, _ := pluginTypes(e.read(t, "10-kindnet.conflist"))
		if !slices.Equal(types, []string{"ptp", "portmap", c.typ, "mesh-cni"}) || !slices.Equal(res.Others, []string{c.typ}) {
			t.Errorf("%s: chain %v, others %v", c.typ, types, res.Others)
		}
	}
}

func TestMigrateFromChecked(t *testing.T) {
	checkRefused(t, []refusal{
		{func(c *Config) { c.MigrateFrom = "cilium" }, "must be one of"},
		{func(c *Config) { c.MigrateFrom = "istio-cni"; c.Subdir = true }, "inline chaining"},
		{func(c *Config) { c.MigrateFrom = "linkerd-cni"; c.Chained = false }, "inline chaining"},
	})
}
