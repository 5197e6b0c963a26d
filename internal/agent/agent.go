// Package agent is the node agent's run loop: it keeps the plugin
// installed (internal/agent/install), the plugin's kubeconfig fresh (internal/agent/kubeconfig)
// and the readiness marker and Node status in step with both.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/mesh-cni/mesh-cni/internal/agent/install"
	"github.com/mesh-cni/mesh-cni/internal/agent/kubeconfig"
	"github.com/mesh-cni/mesh-cni/internal/agent/metrics"
	"github.com/mesh-cni/mesh-cni/internal/node"
)

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
	// ReasonOtherMesh: another mesh's CNI plugin is chained beside ours
	// (install.Result.Others); once each time the set of them changes to
	// a non-empty one.
	ReasonOtherMesh = "MeshCNIOtherMeshChained"
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
	lastOthers   string // the other mesh plugins last warned about
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
	a.noteOthers(st)
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
