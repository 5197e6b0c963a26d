// Package node holds the contract between the plugin and the node agent:
// host paths, the readiness marker, and the event the plugin reports.
package node

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Default host paths. The run dir is tmpfs on purpose: after a reboot the
// marker is gone until the agent has checked the node again. The state dir is
// persistent so the kubeconfig and restore backups survive reboots.
const (
	DefaultRunDir       = "/var/run/mesh-cni"
	DefaultStateDir     = "/var/lib/mesh-cni"
	DefaultReadyMarker  = DefaultRunDir + "/ready"
	DefaultAgentSocket  = DefaultRunDir + "/agent.sock"
	DefaultReportSocket = DefaultRunDir + "/report.sock"
	DefaultKubeconfig   = DefaultStateDir + "/kubeconfig"
	DefaultBinDir       = "/opt/cni/bin"
	DefaultConfDir      = "/etc/cni/net.d"
	PluginType          = "mesh-cni"
	// HelperBinary does the plugin's fallback pod GET through the API
	// server (cmd/mesh-cni-podget/); it sits beside the plugin in the CNI bin dir.
	HelperBinary = "mesh-cni-podget"

	// PodAnnotationsCapability makes containerd and CRI-O pass the pod's
	// annotations in runtimeConfig, so ADD needs no API call.
	PodAnnotationsCapability = "io.kubernetes.cri.pod-annotations"

	// ValidatorExitCode is what mesh-cni-validator exits with when the
	// redirect is missing. Linkerd's network-validator uses 95 and Istio's
	// istio-validation 126; the repair controller recognises all three.
	ValidatorExitCode      = 97
	LinkerdValidatorExit   = 95
	IstioValidatorExitCode = 126
)

// Marker is the readiness marker the agent writes once binary, chain entry
// and kubeconfig are in place. The plugin's STATUS reads it.
type Marker struct {
	Version    string    `json:"version"`
	Backend    string    `json:"backend,omitempty"`
	Binary     string    `json:"binary"`
	Conf       string    `json:"conf"`
	Kubeconfig string    `json:"kubeconfig"`
	Time       time.Time `json:"time"`
}

// ReadMarker returns the marker at path, or an error saying why the node is
// not ready.
func ReadMarker(path string) (*Marker, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("readiness marker %s: %w", path, err)
	}
	var m Marker
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("readiness marker %s is not valid JSON: %w", path, err)
	}
	if m.Binary == "" || m.Conf == "" {
		return nil, fmt.Errorf("readiness marker %s is incomplete (binary %q, conf %q)", path, m.Binary, m.Conf)
	}
	return &m, nil
}

// WriteMarker writes the marker atomically (temp file + rename).
func WriteMarker(path string, m *Marker) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create marker dir: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".ready-*")
	if err != nil {
		return fmt.Errorf("write marker: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("write marker: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write marker: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("write marker: %w", err)
	}
	return os.Rename(tmp.Name(), path)
}

// Event is one datagram the plugin sends to the agent's report socket after
// each verb. Sending never blocks the plugin.
type Event struct {
	Command   string  `json:"cmd"`              // ADD, DEL, CHECK
	Decision  string  `json:"decision"`         // meshed, skipped, failed, deleted
	Reason    string  `json:"reason,omitempty"` // short, low-cardinality
	Mesh      string  `json:"mesh,omitempty"`
	Backend   string  `json:"backend,omitempty"`
	Fallback  string  `json:"fallback,omitempty"` // the configured backend, when it could not run and nftables did
	Seconds   float64 `json:"seconds"`
	Namespace string  `json:"namespace,omitempty"`
	Pod       string  `json:"pod,omitempty"`
	PodUID    string  `json:"podUID,omitempty"`  // from CNI_ARGS, so the agent's Event lands on this pod
	Message   string  `json:"message,omitempty"` // what failed, for a person (the error, clipped)
}

// OtherMeshEffect is what another mesh's CNI plugin chained beside mesh-cni
// (istio-cni or linkerd-cni kept because migrateFrom does not name it)
// does to the node's pods, as TestIstioBothPlugins measured (docs/istio.md,
// "Both plugins in one chain"). The agent's log line and Event and
// mesh-cnictl check all say it in these words.
const OtherMeshEffect = "the node's pods get both plugins' redirection, and with the other plugin's entry first " +
	"(the order kept when mesh-cni is chained after it) a TPROXY pod (Istio's interceptionMode: TPROXY) " +
	"gets no answer on any TCP connection through eth0"

// OtherMeshFix says how to leave the state OtherMeshEffect describes.
func OtherMeshFix(plugin string) string {
	return "to switch to mesh-cni, set migrateFrom=" + plugin + " (helm upgrade --reuse-values --set migrateFrom=" + plugin +
		"; docs/istio.md or docs/linkerd.md); to keep " + plugin + ", uninstall mesh-cni"
}
