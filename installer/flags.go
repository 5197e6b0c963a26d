package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/mesh-cni/mesh-cni/internal/agent"
	"github.com/mesh-cni/mesh-cni/internal/agent/install"
	meshconfig "github.com/mesh-cni/mesh-cni/internal/config"
)

type config struct {
	cniBinDir, cniConfDir, confFileName string
	chained, subdirChaining             bool
	migrateFrom                         string
	handBackTo                          string
	stateDir, hostStateDir              string
	runDir, hostRunDir                  string
	pluginConfig, pluginBinary          string
	podgetBinary                        string
	logLevel                            string
	probeAddr, metricsAddr              string
	nodeName, namespace, daemonSetName  string
	tokenPath, caPath                   string
	startupTaint                        string
	repair                              bool
	repairPolicy                        string
	uninstallMode                       string
	checkPrimaryBinaries                bool
	hostToolDirs                        string
	pluginServiceAccount                string
	allowAgentTokenForPlugin            bool
}

// EnvPrefix: every flag can also come from MESH_CNI_<FLAG_IN_CAPS>.
const EnvPrefix = "MESH_CNI_"

func envName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// newFlagSet binds every flag to c. The defaults are the chart's: the
// binary run without flags is as safe as the DaemonSet the chart renders
// (TestFlagDefaultsAreTheChart holds them together).
func newFlagSet(c *config) *flag.FlagSet {
	fs := flag.NewFlagSet("mesh-cni-agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.cniBinDir, "cni-bin-dir", "/host/opt/cni/bin", "container path of the mounted host CNI bin dir")
	fs.StringVar(&c.cniConfDir, "cni-conf-dir", "/host/etc/cni/net.d", "container path of the mounted host CNI conf dir")
	fs.StringVar(&c.confFileName, "conf-file-name", "", "primary config file name (empty: pick it as the runtime does)")
	fs.BoolVar(&c.chained, "chained", true, "chain into the primary config; false writes a standalone conflist (Multus)")
	fs.BoolVar(&c.subdirChaining, "subdir-chaining", false, "drop <confdir>/<network>/mesh-cni.conf instead of editing the primary (libcni >= 1.3)")
	fs.StringVar(&c.migrateFrom, "migrate-from", "", "another mesh CNI plugin ("+strings.Join(install.MigrateSources, ", ")+") whose entry in the primary config mesh-cni replaces in the write that chains it, and keeps replacing while its installer still runs (empty: leave other entries be)")
	fs.StringVar(&c.handBackTo, "hand-back-to", "", "another mesh CNI plugin ("+strings.Join(install.MigrateSources, ", ")+") that takes the node back: while the primary config holds its entry mesh-cni's is taken out, in one write; while it holds none mesh-cni's is chained (empty: off)")
	fs.StringVar(&c.stateDir, "state-dir", "/host/var/lib/mesh-cni", "container path of the persistent state dir")
	fs.StringVar(&c.hostStateDir, "host-state-dir", "/var/lib/mesh-cni", "host path of the state dir")
	fs.StringVar(&c.runDir, "run-dir", "/host/var/run/mesh-cni", "container path of the run dir (tmpfs)")
	fs.StringVar(&c.hostRunDir, "host-run-dir", "/var/run/mesh-cni", "host path of the run dir")
	fs.StringVar(&c.pluginConfig, "plugin-config", "/etc/mesh-cni/plugin.json", "chain entry JSON")
	fs.StringVar(&c.pluginBinary, "plugin-binary", "/mesh-cni", "plugin binary in the image")
	fs.StringVar(&c.podgetBinary, "podget-binary", "/mesh-cni-podget", "mesh-cni-podget in the image: the plugin's API-server lookup, installed beside the plugin")
	fs.StringVar(&c.logLevel, "log-level", meshconfig.DefaultLogLevel, strings.Join(meshconfig.LogLevels, ", "))
	fs.StringVar(&c.probeAddr, "probe-addr", "127.0.0.1:9196", "address for /healthz and /readyz (\":9196\": every node address)")
	fs.StringVar(&c.metricsAddr, "metrics-addr", "127.0.0.1:9197", "loopback address for /metrics (plain HTTP); beyond loopback run mesh-cni-metrics-proxy in front of it")
	fs.StringVar(&c.nodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name")
	fs.StringVar(&c.namespace, "namespace", os.Getenv("POD_NAMESPACE"), "the agent's namespace")
	fs.StringVar(&c.daemonSetName, "daemonset-name", "mesh-cni", "the agent's DaemonSet")
	fs.StringVar(&c.tokenPath, "token-path", "/var/run/secrets/kubernetes.io/serviceaccount/token", "projected service-account token")
	fs.StringVar(&c.caPath, "ca-path", "", "API server CA bundle (empty: ca.crt next to the token)")
	fs.StringVar(&c.startupTaint, "startup-taint", "", "taint key to remove from the node once ready (empty: off)")
	fs.BoolVar(&c.repair, "repair", true, "run the repair controller")
	fs.StringVar(&c.repairPolicy, "repair-policy", "delete", "delete, label or evict (evict cannot be confined to this node)")
	fs.StringVar(&c.uninstallMode, "uninstall-mode", "auto", "auto (only when the DaemonSet is gone or being deleted), always or never")
	fs.BoolVar(&c.checkPrimaryBinaries, "check-primary-binaries", true, "chain only when the CNI bin dir holds the primary config's plugins (else it is not the runtime's bin dir)")
	fs.StringVar(&c.hostToolDirs, "host-tool-dirs", "/host/usr/sbin,/host/usr/local/sbin,/host/usr/bin,/host/usr/local/bin", "comma-separated container paths of the host dirs where the plugin finds the iptables backends' binaries (read-only mounts); missing dirs are skipped")
	fs.StringVar(&c.pluginServiceAccount, "plugin-service-account", "mesh-cni-plugin", "ServiceAccount (in --namespace) whose short-lived tokens the host kubeconfig holds")
	fs.BoolVar(&c.allowAgentTokenForPlugin, "allow-agent-token-for-plugin", false, "UNSAFE: with --plugin-service-account empty, write the agent's own token into the host kubeconfig")
	return fs
}

func parseFlags(args []string) (*config, error) {
	c := &config{}
	fs := newFlagSet(c)
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if v, ok := os.LookupEnv(envName(f.Name)); ok && envErr == nil {
			if err := f.Value.Set(v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", envName(f.Name), v, err)
			}
		}
	})
	if envErr != nil {
		return nil, envErr
	}
	// The command line wins over the environment.
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stderr)
			fmt.Fprintln(os.Stderr, "Usage of mesh-cni-agent (every flag also as MESH_CNI_<FLAG>):")
			fs.PrintDefaults()
		}
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	switch c.repairPolicy {
	case "evict", "delete", "label":
	default:
		return nil, fmt.Errorf("--repair-policy must be evict, delete or label, not %q", c.repairPolicy)
	}
	if c.handBackTo != "" && !slices.Contains(install.MigrateSources, c.handBackTo) {
		return nil, fmt.Errorf("--hand-back-to must be empty or one of %s, not %q", strings.Join(install.MigrateSources, ", "), c.handBackTo)
	}
	if c.handBackTo != "" && c.migrateFrom != "" {
		return nil, fmt.Errorf("--hand-back-to=%s and --migrate-from=%s: set one (one takes the other plugin's entry out, the other takes mesh-cni's out)", c.handBackTo, c.migrateFrom)
	}
	if c.migrateFrom != "" && !slices.Contains(install.MigrateSources, c.migrateFrom) {
		return nil, fmt.Errorf("--migrate-from must be empty or one of %s, not %q", strings.Join(install.MigrateSources, ", "), c.migrateFrom)
	}
	switch c.uninstallMode {
	case "auto", "always", "never":
	default:
		return nil, fmt.Errorf("--uninstall-mode must be auto, always or never, not %q", c.uninstallMode)
	}
	if c.podgetBinary == "" {
		return nil, fmt.Errorf("--podget-binary must name mesh-cni-podget in the image: the plugin runs it when the agent cannot answer for a pod")
	}
	if c.pluginServiceAccount == "" && !c.allowAgentTokenForPlugin {
		return nil, fmt.Errorf("--plugin-service-account is empty: the host kubeconfig would carry the agent's own token " +
			"(every permission of the agent, readable on the host); name the plugin's ServiceAccount, " +
			"or accept that with --allow-agent-token-for-plugin")
	}
	// Nothing unauthenticated on the node's addresses: beyond loopback,
	// mesh-cni-metrics-proxy serves /metrics with TokenReview and
	// SubjectAccessReview, and the agent stays on loopback behind it.
	if loop, err := agent.Loopback(c.metricsAddr); err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	} else if !loop {
		return nil, fmt.Errorf("--metrics-addr=%s is beyond loopback: the agent serves /metrics as plain HTTP on loopback only; "+
			"serve it beyond loopback with mesh-cni-metrics-proxy (HTTPS, TokenReview and SubjectAccessReview), as the chart does for metrics.bindAddress", c.metricsAddr)
	}
	if c.logLevel == "" { // the chart's logLevel left null
		c.logLevel = meshconfig.DefaultLogLevel
	}
	if !slices.Contains(meshconfig.LogLevels, strings.ToLower(c.logLevel)) {
		return nil, fmt.Errorf("--log-level must be one of %s, not %q", strings.Join(meshconfig.LogLevels, ", "), c.logLevel)
	}
	return c, nil
}
