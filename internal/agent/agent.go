// Package agent is the node agent's run loop: it keeps the plugin
// installed (internal/agent/install), the plugin's kubeconfig fresh (internal/agent/kubeconfig)
// and the readiness marker and Node status in step with both.
package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/mesh-cni/mesh-cni/internal/agent/install"
	"github.com/mesh-cni/mesh-cni/internal/agent/kubeconfig"
	"github.com/mesh-cni/mesh-cni/internal/agent/metrics"
	"github.com/mesh-cni/mesh-cni/internal/node"
	"github.com/mesh-cni/mesh-cni/internal/retry"
)

// StatusAnnotation is the Node annotation the agent keeps up to date.
const StatusAnnotation = "mesh-cni.io/agent-status"

// Status is the annotation's JSON: the readiness marker plus whether the
// agent is ready and, when not, why, and, when ready, the chain entry in
// force. The entry rides in the annotation the agent already owns (a few
// hundred bytes, compact): no ConfigMap and no write permission beyond
// that one annotation on its own Node, and readers need only "get nodes".
type Status struct {
	node.Marker
	Ready  bool            `json:"ready"`
	Reason string          `json:"reason,omitempty"`
	Entry  json.RawMessage `json:"entry,omitempty"`
	// Takeover says how replacing another mesh CNI's entry goes
	// (migrateFrom): "taking over from istio-cni (...)", then "took over".
	Takeover string `json:"takeover,omitempty"`
	// HandedBack (handBackTo) names the plugin the node went back to:
	// its entry is in the primary and mesh-cni's is out.
	HandedBack string `json:"handedBack,omitempty"`
}

// Options wire the agent. Paths are as the agent's container sees them;
// HostPath maps one to the host's view for the marker.
type Options struct {
	Installer   *install.Installer
	Watch       install.WatchOptions
	Kubeconfig  string // where to write the plugin's kubeconfig
	KubeOpts    kubeconfig.Options
	KubeOptsErr error // why KubeOpts could not be built (not in a pod)
	Marker      string
	HostPath    func(string) string
	Backend     string
	Version     string
	TokenResync time.Duration                       // default 1m
	Publish     func(context.Context, Status) error // Node annotation; nil = off
	// PublishBackoff spaces the retries of a failed Publish; zero means
	// retry.Backoff(30s).
	PublishBackoff wait.Backoff
	OnFirstReady   func() // once, the first time ready (startup taint)
	// Published returns the status last published on the Node (nil when
	// there is none); asked once at start when no marker survived (a
	// reboot empties the run dir), so the ready time can carry over.
	Published func(context.Context) (*Status, error)
	// Event records an Event on the Node; nil = off. eventType is
	// EventNormal or EventWarning, reason one of the Reason constants.
	Event func(eventType, reason, message string)
	Log   *slog.Logger
}

// The types of the agent's Events (core/v1's EventTypeNormal and
// EventTypeWarning, without linking the API types here).
const (
	EventNormal  = "Normal"
	EventWarning = "Warning"
)

// Reasons of the agent's Events on its Node.
const (
	// ReasonReady: the agent became ready (each time, not only the first).
	ReasonReady = "MeshCNIReady"
	// ReasonRefused: the agent will not chain, because the entry does not
	// validate or the node cannot run it; once per distinct refusal
	// (install.ErrRefused), not on every retry.
	ReasonRefused = "MeshCNIConfigRefused"
	// ReasonRechained: another component rewrote the primary's config
	// without our entry and the agent put it back.
	ReasonRechained = "MeshCNIRechained"
	// ReasonFight: re-chains come so often that something keeps removing
	// the entry (install.WatchOptions.FightCount within FightWindow).
	ReasonFight = "MeshCNIConfigFight"
)

// Agent is safe for concurrent use by the HTTP handlers.
type Agent struct {
	o Options

	mu           sync.Mutex
	inst         install.State
	passes       int
	reports      int // every pass reported, settling ones included
	kubeErr      error
	kubeDone     bool
	status       Status
	markerOn     bool
	running      bool
	lastFail     string
	readyOnce    sync.Once
	lastKubeFail string
	publishCh    chan Status
	// prev is the marker (or Node status) an earlier run left: its time
	// carries over when this run comes up ready in the same state.
	prev *node.Marker
}

// New returns an agent; Run starts it.
func New(o Options) *Agent {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.HostPath == nil {
		o.HostPath = func(p string) string { return p }
	}
	if o.TokenResync == 0 {
		o.TokenResync = time.Minute
	}
	a := &Agent{o: o, publishCh: make(chan Status, 1)}
	a.status = Status{Reason: "starting"}
	if m, err := node.ReadMarker(o.Marker); err == nil && !m.Time.IsZero() {
		a.prev = m
	}
	return a
}

// loadPublished falls back to the Node status for the previous ready time
// when no marker survived.
func (a *Agent) loadPublished(ctx context.Context) {
	a.mu.Lock()
	have := a.prev != nil
	a.mu.Unlock()
	if have || a.o.Published == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	st, err := a.o.Published(ctx)
	if err != nil {
		a.o.Log.Debug("cannot read the published status; a ready time starts now", "err", err)
		return
	}
	if st != nil && st.Ready && !st.Time.IsZero() {
		m := st.Marker
		a.mu.Lock()
		a.prev = &m
		a.mu.Unlock()
	}
}

// Run keeps everything in place until ctx ends. It leaves everything in
// place when it returns; Uninstall removes it.
func (a *Agent) Run(ctx context.Context) error {
	a.mu.Lock()
	a.running = true
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.running = false
		a.mu.Unlock()
	}()
	a.loadPublished(ctx)
	if a.o.Publish != nil {
		go a.publishLoop(ctx)
	}
	a.writeKubeconfig()
	go a.watchToken(ctx)
	return a.o.Installer.Run(ctx, a.o.Watch, a.onPass)
}

// Status returns the current status.
func (a *Agent) Status() Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.status
}

// Healthy is false once the watch loop has stopped.
func (a *Agent) Healthy() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.running {
		return errors.New("install loop not running")
	}
	return nil
}

func (a *Agent) onPass(st install.State) {
	a.mu.Lock()
	a.reports++
	a.mu.Unlock()
	if errors.Is(st.Err, install.ErrSettling) {
		// A file is mid-write; the loop checks again in a moment. Keep
		// the last state instead of flapping the marker and Node status.
		return
	}
	if st.Rechained {
		metrics.Rechains.Inc()
		a.event(EventNormal, ReasonRechained, "the primary's config "+st.Conf+" was rewritten without mesh-cni; the entry is chained again")
	}
	if st.Fight != "" {
		a.event(EventWarning, ReasonFight, st.Fight)
	}
	if t := st.Takeover; t.From != "" {
		metrics.TakeoverReplaced.WithLabelValues(t.From).Add(float64(st.Replaced))
		metrics.Takeover.WithLabelValues(t.From).Set(map[bool]float64{false: 1, true: 0}[t.Done])
	}
	switch {
	case st.Err != nil && !errors.Is(st.Err, install.ErrSettling):
		a.mu.Lock()
		first := st.Err.Error() != a.lastFail
		a.lastFail = st.Err.Error()
		a.mu.Unlock()
		if first {
			metrics.Installs.WithLabelValues(st.Stage + "_failure").Inc()
			if errors.Is(st.Err, install.ErrRefused) {
				a.event(EventWarning, ReasonRefused, st.Err.Error())
			}
		}
	case st.Err == nil && (st.Wrote || st.BinaryChanged):
		metrics.Installs.WithLabelValues("success").Inc()
		a.mu.Lock()
		a.lastFail = ""
		a.mu.Unlock()
	}
	a.mu.Lock()
	a.inst = st
	a.passes++
	a.mu.Unlock()
	a.update()
}

// event records an Event on the Node when Options.Event is set. The
// recorder must not block: update calls it holding a.mu.
func (a *Agent) event(eventType, reason, message string) {
	if a.o.Event != nil {
		a.o.Event(eventType, reason, message)
	}
}

func (a *Agent) writeKubeconfig() {
	err := a.o.KubeOptsErr
	wrote := false
	if err == nil {
		wrote, err = kubeconfig.Write(a.o.Kubeconfig, a.o.KubeOpts)
	}
	failed := err
	if err != nil {
		err = fmt.Errorf("kubeconfig: %w", err)
		failed = err
		// A refresh that fails (a token being rotated, an unreadable CA)
		// leaves the last good kubeconfig in place: the node stays ready
		// on it rather than flapping, and the failure is logged.
		if usableKubeconfig(a.o.Kubeconfig) {
			err = nil
		}
	}
	a.mu.Lock()
	changed := (err == nil) != (a.kubeErr == nil) || !a.kubeDone
	warn := failed != nil && (a.lastKubeFail == "" || a.lastKubeFail != failed.Error())
	if failed != nil {
		a.lastKubeFail = failed.Error()
	} else {
		a.lastKubeFail = ""
	}
	a.kubeErr, a.kubeDone = err, true
	a.mu.Unlock()
	switch {
	case warn:
		a.o.Log.Warn("cannot write the plugin's kubeconfig", "err", failed, "keeping_previous", err == nil)
		metrics.Installs.WithLabelValues("kubeconfig_failure").Inc()
	case wrote:
		a.o.Log.Info("wrote the plugin's kubeconfig", "path", a.o.Kubeconfig)
	}
	if changed || wrote {
		a.update()
	}
}

// usableKubeconfig: the file exists and holds a server and a token.
func usableKubeconfig(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	var c kubeconfig.Config
	if json.Unmarshal(b, &c) != nil || len(c.Clusters) == 0 || len(c.Users) == 0 {
		return false
	}
	return c.Clusters[0].Cluster.Server != "" && c.Users[0].User.Token != ""
}

// watchToken rewrites the kubeconfig when kubelet rotates the projected
// token (an atomic symlink swap in the token's dir), and every TokenResync
// in case an event was missed.
func (a *Agent) watchToken(ctx context.Context) {
	var events chan fsnotify.Event
	if a.o.KubeOpts.TokenPath != "" {
		if w, err := fsnotify.NewWatcher(); err == nil {
			defer w.Close()
			if err := w.Add(filepath.Dir(a.o.KubeOpts.TokenPath)); err == nil {
				events = w.Events
			} else {
				a.o.Log.Warn("cannot watch the token dir; re-reading it periodically", "err", err)
			}
		}
	}
	t := time.NewTicker(a.o.TokenResync)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-events:
			// Settle: the writer swaps several links in a row.
			time.Sleep(50 * time.Millisecond)
			drainEvents(events)
		case <-t.C:
		}
		a.writeKubeconfig()
	}
}

func drainEvents(ch chan fsnotify.Event) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// update recomputes readiness and brings marker, gauge and Node status in
// line with it.
func (a *Agent) update() {
	a.mu.Lock()
	defer a.mu.Unlock()
	var reasons []string
	if a.passes == 0 {
		reasons = append(reasons, "install not checked yet")
	}
	if a.inst.Err != nil {
		reasons = append(reasons, a.inst.Err.Error())
	} else if a.passes > 0 && !a.inst.Watching {
		reasons = append(reasons, "not watching the CNI dirs")
	}
	if a.kubeErr != nil {
		reasons = append(reasons, a.kubeErr.Error())
	} else if !a.kubeDone {
		reasons = append(reasons, "kubeconfig not written yet")
	}
	st := Status{Ready: len(reasons) == 0, Reason: strings.Join(reasons, "; "), Takeover: a.inst.Takeover.String(), HandedBack: a.inst.HandedBack}
	st.Marker = node.Marker{
		Version: a.o.Version,
		Backend: a.o.Backend,
		Time:    a.status.Time,
	}
	if st.Ready {
		st.Binary = a.o.HostPath(a.o.Installer.BinaryPath())
		st.Conf = a.o.HostPath(a.inst.Conf)
		st.Kubeconfig = a.o.HostPath(a.o.Kubeconfig)
		st.Entry = compactJSON(a.inst.Entry)
	}
	changed := st.Ready != a.status.Ready || st.Reason != a.status.Reason || st.Conf != a.status.Conf ||
		!bytes.Equal(st.Entry, a.status.Entry)
	if changed {
		st.Time = time.Now().UTC().Truncate(time.Second)
		if p := a.prev; st.Ready && p != nil && p.Binary == st.Binary && p.Conf == st.Conf && p.Kubeconfig == st.Kubeconfig {
			// A restart (rolling update) into the same state: binary,
			// chain entry and kubeconfig never left, so the node has been
			// ready since then, not since now.
			st.Time = p.Time
		}
		if st.Ready || a.passes > 0 {
			a.prev = nil // only this run's first verdict can carry over
		}
	}
	// The marker is what STATUS answers from: it says the chained entry
	// can serve ADD. Settings refused while an earlier entry of ours stays
	// chained leave the agent not ready, but the node keeps serving pods
	// through that entry, so a bad new setting never turns its network
	// not ready.
	kept := !st.Ready && a.inst.Kept != "" && errors.Is(a.inst.Err, install.ErrRefused) &&
		a.kubeErr == nil && a.kubeDone && a.passes > 0
	if st.Ready || kept {
		if _, err := os.Stat(a.o.Marker); changed || !a.markerOn || err != nil {
			m := st.Marker
			if kept {
				m.Binary = a.o.HostPath(a.o.Installer.BinaryPath())
				m.Conf = a.o.HostPath(a.inst.Kept)
				m.Kubeconfig = a.o.HostPath(a.o.Kubeconfig)
			}
			if err := node.WriteMarker(a.o.Marker, &m); err != nil {
				a.o.Log.Error("cannot write the readiness marker", "path", a.o.Marker, "err", err)
				if st.Ready {
					st.Ready, st.Reason = false, fmt.Sprintf("readiness marker: %v", err)
					st.Binary, st.Conf, st.Kubeconfig = "", "", ""
				}
				kept = false
			} else {
				a.markerOn = true
			}
		}
	}
	if !st.Ready && !kept && (a.markerOn || a.passes == 1) {
		// Also on the first pass: a marker from a previous run must not
		// claim readiness we have not checked.
		if err := os.Remove(a.o.Marker); err != nil && !errors.Is(err, os.ErrNotExist) {
			a.o.Log.Error("cannot remove the readiness marker", "path", a.o.Marker, "err", err)
		}
		a.markerOn = false
	}
	if st.Ready {
		metrics.Ready.Set(1)
	} else {
		metrics.Ready.Set(0)
	}
	if changed {
		if st.Ready {
			a.o.Log.Info("ready", "conf", st.Conf, "binary", st.Binary)
			a.event(EventNormal, ReasonReady, fmt.Sprintf("mesh-cni %s is chained in %s (backend %s)", a.o.Version, st.Conf, a.o.Backend))
		} else if a.status.Ready {
			a.o.Log.Warn("not ready", "reason", st.Reason)
		}
	}
	// A takeover starting or ending, and a hand-back, are published too; they do not move
	// the ready time.
	publish := changed || takeoverPhase(st.Takeover) != takeoverPhase(a.status.Takeover) || st.HandedBack != a.status.HandedBack
	a.status = st
	if publish && a.o.Publish != nil {
		select {
		case <-a.publishCh:
		default:
		}
		a.publishCh <- st
	}
	if st.Ready && a.o.OnFirstReady != nil {
		a.readyOnce.Do(func() { go a.o.OnFirstReady() })
	}
}

// publishLoop writes the latest status to the Node, retrying on
// o.PublishBackoff; a newer status replaces one still being retried and
// starts the backoff over.
func (a *Agent) publishLoop(ctx context.Context) {
	b := a.o.PublishBackoff
	if b == (wait.Backoff{}) {
		b = retry.Backoff(30 * time.Second)
	}
	var pending *Status
	next := b.DelayFunc()
	var retryIn time.Duration
	for {
		var again <-chan time.Time
		var t *time.Timer
		if pending != nil {
			t = time.NewTimer(retryIn)
			again = t.C
		}
		select {
		case <-ctx.Done():
			return
		case st := <-a.publishCh:
			pending, next = &st, b.DelayFunc()
		case <-again:
		}
		if t != nil {
			t.Stop()
		}
		if pending == nil {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := a.o.Publish(pctx, *pending)
		cancel()
		if err == nil {
			pending = nil
			continue
		}
		retryIn = next()
		a.o.Log.Warn("cannot publish status on the Node", "err", err, "retry_in", retryIn)
	}
}

// Uninstall removes, in this order, the readiness marker (the plugin
// reports not-ready at once), the chain entry (the primary restored), the
// kubeconfig, and last the binary, so no config ever names a missing
// plugin.
func (a *Agent) Uninstall() error {
	var errs []error
	if err := os.Remove(a.o.Marker); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("remove marker: %w", err))
	}
	if err := a.o.Installer.Uninstall(); err != nil {
		// Keep the binary: a config may still name it.
		return errors.Join(append(errs, err)...)
	}
	if err := install.RemoveFileDurable(a.o.Kubeconfig); err != nil {
		errs = append(errs, err)
	}
	if err := a.o.Installer.RemoveBinary(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// compactJSON is b without insignificant space, or nil when b is not JSON.
func compactJSON(b []byte) json.RawMessage {
	var out bytes.Buffer
	if len(b) == 0 || json.Compact(&out, b) != nil {
		return nil
	}
	return out.Bytes()
}

// takeoverPhase is the part of the takeover line whose change is worth a
// Node status update: started, done; not every count.
func takeoverPhase(s string) string {
	if i := strings.Index(s, " ("); i >= 0 {
		return s[:i]
	}
	return s
}
