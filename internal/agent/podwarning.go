package agent

import (
	"fmt"

	"github.com/mesh-cni/mesh-cni/internal/node"
)

// Reasons of the Warning Events the agent puts on pods.
const (
	EventAddFailed       = "MeshCNIAddFailed"
	EventDelFailed       = "MeshCNIDelFailed"
	EventBackendFallback = "MeshCNIBackendFallback"
)

// maxEventMessage bounds what a report can put in an Event.
const maxEventMessage = 1024

// PodWarning says whether a plugin report is something the pod's owner must
// see in `kubectl describe pod`, and with which reason and message: a failed
// ADD (a bad annotation, a pod that cannot be judged, no usable backend), a
// failed DEL, and a backend fallback. A skipped pod is the normal case for
// unmeshed pods and stays in the metrics.
func PodWarning(ev node.Event) (reason, message string, ok bool) {
	if ev.Namespace == "" || ev.Pod == "" {
		return "", "", false
	}
	why := ""
	if ev.Reason != "" {
		why = " (" + bounded(ev.Reason, 64) + ")"
	}
	switch {
	case ev.Decision == "failed" && ev.Command == "ADD":
		return EventAddFailed, "mesh-cni could not set up the pod's traffic redirect" + why + ": " + bounded(ev.Message, maxEventMessage), true
	case ev.Decision == "failed" && ev.Command == "DEL":
		return EventDelFailed, "mesh-cni could not remove the pod's traffic redirect" + why + ": " + bounded(ev.Message, maxEventMessage), true
	case ev.Fallback == "nftables":
		// Only backend auto falls back from nftables (a pinned nftables fails
		// ADD instead): choosing iptables on a kernel without nf_tables is
		// what auto is for, so it is counted in the metric, not warned about
		// on every pod.
		return "", "", false
	case ev.Fallback != "" && ev.Command == "ADD" && knownBackends[ev.Fallback]:
		used := bounded(ev.Backend, 32)
		if used == "" {
			used = "another backend"
		}
		return EventBackendFallback, fmt.Sprintf("the backend %s cannot run on this node (its tools are missing, or the kernel refuses its sockets); the pod's rules were written with %s", ev.Fallback, used), true
	}
	return "", "", false
}
