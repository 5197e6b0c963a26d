package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/mesh-cni/mesh-cni/internal/agent/install"
	"github.com/mesh-cni/mesh-cni/internal/agent/metrics"
	"github.com/mesh-cni/mesh-cni/internal/node"
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
	// Others names the other mesh CNI plugins chained beside mesh-cni in
	// the primary (install.Result.Others): the node stays ready, since
	// most pods still work, but mesh-cnictl check fails on it.
	Others []string `json:"others,omitempty"`
}

// update recomputes readiness and brings marker, gauge and Node status in
// line with it. Every step runs under a.mu, so passes and kubeconfig
// refreshes cannot interleave their verdicts.
func (a *Agent) update() {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.verdict()
	changed := a.stamp(&st)
	a.syncMarker(&st, changed)
	a.announce(st, changed)
}

// verdict says whether binary, chain entry and kubeconfig are in place,
// and why not; when ready it names them and the entry in force.
func (a *Agent) verdict() Status {
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
	st := Status{Ready: len(reasons) == 0, Reason: strings.Join(reasons, "; "), Takeover: a.inst.Takeover.String(), HandedBack: a.inst.HandedBack,
		Others: a.inst.Others}
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
	return st
}

// stamp reports whether st differs from the status in force and, when it
// does, dates it: now, or the previous run's time when that run left the
// node ready in the same state.
func (a *Agent) stamp(st *Status) bool {
	changed := st.Ready != a.status.Ready || st.Reason != a.status.Reason || st.Conf != a.status.Conf ||
		!bytes.Equal(st.Entry, a.status.Entry)
	if !changed {
		return false
	}
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
	return true
}

// syncMarker writes or removes the readiness marker. The marker is what
// STATUS answers from: it says the chained entry can serve ADD. Settings
// refused while an earlier entry of ours stays chained leave the agent not
// ready, but the node keeps serving pods through that entry, so a bad new
// setting never turns its network not ready. A marker that cannot be
// written makes st not ready.
func (a *Agent) syncMarker(st *Status, changed bool) {
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
}

// announce puts st in force: the ready gauge, a log line and Event when
// readiness changed, the Node status, and the first-ready hook.
func (a *Agent) announce(st Status, changed bool) {
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
	// A takeover starting or ending, a hand-back, and another mesh's plugin
	// chained beside ours or gone are published too; they do not move the
	// ready time.
	publish := changed || takeoverPhase(st.Takeover) != takeoverPhase(a.status.Takeover) || st.HandedBack != a.status.HandedBack ||
		!slices.Equal(st.Others, a.status.Others)
	a.status = st
	if publish && a.o.Publish != nil {
		// Only the newest status matters: replace one not yet taken.
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

// noteOthers puts a Warning Event on the Node when another mesh's plugin
// is first found chained beside ours, and again when the set changes. A
// failed pass says nothing about the primary and changes nothing.
func (a *Agent) noteOthers(st install.State) {
	if st.Err != nil {
		return
	}
	o := strings.Join(st.Others, ",")
	a.mu.Lock()
	first := o != "" && o != a.lastOthers
	a.lastOthers = o
	a.mu.Unlock()
	if first {
		a.event(EventWarning, ReasonOtherMesh, fmt.Sprintf("%s is chained beside mesh-cni in %s: %s; %s",
			strings.Join(st.Others, " and "), st.Conf, node.OtherMeshEffect, node.OtherMeshFix(st.Others[0])))
	}
}
