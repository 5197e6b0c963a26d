// Package metrics holds the node agent's Prometheus metrics, in one
// registry that the agent serves on /metrics. The run loop (internal/agent)
// and the agent binary, which counts the repair controller's actions,
// both increment them here; docs/docs_test.go reads the names from this file.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/mesh-cni/mesh-cni/internal/version"
)

// Registry is what /metrics serves.
var Registry = prometheus.NewRegistry()

var (
	// BuildInfo is 1, labelled with the release and commit the agent was
	// built from, so a dashboard can tell which build runs on each node.
	BuildInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mesh_cni_build_info",
		Help: "Always 1; the labels give the agent's release version and git commit.",
	}, []string{"version", "commit"})

	// Installs counts install passes that changed something, by result:
	// success, binary_failure, config_failure, kubeconfig_failure.
	Installs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mesh_cni_agent_installs_total",
		Help: "Install passes that wrote the binary, config or kubeconfig, or failed, by result.",
	}, []string{"result"})

	// Rechains counts re-insertions after someone else removed our entry.
	Rechains = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "mesh_cni_agent_rechains_total",
		Help: "Times the chain entry was put back after the primary CNI rewrote its config without it.",
	})

	// Takeover is 1 while the agent replaces another mesh CNI's entry
	// that its installer may still re-insert, 0 once none came for the
	// quiet period (migrateFrom).
	Takeover = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mesh_cni_agent_takeover",
		Help: "1 while taking over from another mesh CNI plugin (its installer may still re-insert its entry), 0 once it stopped.",
	}, []string{"from"})

	// TakeoverReplaced counts the other plugin's entries replaced by ours.
	TakeoverReplaced = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mesh_cni_agent_takeover_replaced_total",
		Help: "Entries of another mesh CNI plugin replaced by mesh-cni's, each in the write that chained mesh-cni.",
	}, []string{"from"})

	// Ready is 1 while binary, chain entry and kubeconfig are in place.
	Ready = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "mesh_cni_agent_ready",
		Help: "1 when the plugin binary, chain entry and kubeconfig are in place and watched.",
	})

	// PluginDuration is the plugin's own time per verb, from its reports.
	PluginDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "mesh_cni_plugin_duration_seconds",
		Help:    "Time the plugin took per CNI verb, as it reported it.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	}, []string{"cmd", "decision"})

	// PluginDecisions counts what the plugin decided per verb.
	PluginDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mesh_cni_plugin_decisions_total",
		Help: "Plugin outcomes by verb, decision (meshed, skipped, failed, deleted), reason and mesh.",
	}, []string{"cmd", "decision", "reason", "mesh"})

	// ReportsDropped counts datagrams on the report socket we could not use.
	ReportsDropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "mesh_cni_agent_reports_dropped_total",
		Help: "Report datagrams that were not valid events.",
	})

	// BackendFallbacks counts plugin runs that wrote with another backend
	// because one could not run on the host: a pinned iptables variant
	// without its tools (nftables used), or nftables under auto (iptables
	// used). The label keeps its name; it is the backend that could not run.
	BackendFallbacks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mesh_cni_backend_fallbacks_total",
		Help: "Plugin runs that fell back to another backend because one could not run on the host, by the backend that could not run.",
	}, []string{"configured"})

	// RepairActions counts what the repair controller did, by policy
	// (evict, delete, label) and result (repaired, blocked, failed).
	RepairActions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mesh_cni_repair_actions_total",
		Help: "Repair controller actions on pods that started without redirection, by policy and result.",
	}, []string{"policy", "result"})
)

func init() {
	BuildInfo.WithLabelValues(version.Version, version.GetCommit()).Set(1)
	Registry.MustRegister(BuildInfo, Installs, Rechains, Takeover, TakeoverReplaced, Ready, PluginDuration, PluginDecisions, ReportsDropped, RepairActions, BackendFallbacks,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
}
