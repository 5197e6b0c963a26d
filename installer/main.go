// Command mesh-cni-agent is the node agent the DaemonSet runs on every
// node: it installs the mesh-cni plugin, keeps it chained into the primary
// CNI config, and removes it again on a real uninstall. Flags are listed
// in README.md.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/mesh-cni/mesh-cni/internal/agent"
	"github.com/mesh-cni/mesh-cni/internal/agent/install"
	"github.com/mesh-cni/mesh-cni/internal/agent/kubeconfig"
	meshconfig "github.com/mesh-cni/mesh-cni/internal/config"
	"github.com/mesh-cni/mesh-cni/internal/node"
	"github.com/mesh-cni/mesh-cni/internal/retry"
	"github.com/mesh-cni/mesh-cni/internal/version"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == agentsReadyCommand {
		os.Exit(agentsReady(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == podRulesCommand {
		os.Exit(podRulesMain(os.Args[2:], os.Stderr))
	}
	if len(os.Args) == 2 && (os.Args[1] == "version" || os.Args[1] == "--version") {
		fmt.Println("mesh-cni-agent " + version.String())
		return
	}
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "mesh-cni-agent:", err)
		os.Exit(2)
	}
	log := newLogger(cfg.logLevel)
	slog.SetDefault(log)
	if err := run(cfg, log); err != nil {
		log.Error("exiting", "err", err)
		os.Exit(1)
	}
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

// hostPath maps a container path under the /host mount to the host's path.
func hostPath(p string) string {
	if strings.HasPrefix(p, "/host/") {
		return p[len("/host"):]
	}
	return p
}

// run starts the agent and its servers, waits for a signal or a failure,
// then uninstalls or leaves the node as it is (shouldUninstall).
func run(cfg *config, log *slog.Logger) error {
	log.Info("starting", "version", version.Version, "commit", version.GetCommit(), "node", cfg.nodeName, "chained", cfg.chained, "subdir", cfg.subdirChaining)
	in, backendName, err := newInstaller(cfg, log)
	if err != nil {
		return err
	}
	api, err := connect(cfg, log)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	rec := eventRecorder(ctx, api.client, cfg.nodeName)
	var uidOf func(namespace, name string) types.UID
	if api.client != nil {
		uidOf = startControllers(ctx, api.client, cfg, log)
	}
	a := agent.New(agentOptions(ctx, cfg, in, backendName, api, rec, log))
	seenDeleted := func() bool { return false }
	if api.client != nil && cfg.uninstallMode == "auto" && cfg.namespace != "" {
		probe, stopProbe := startProbe(ctx, api.client.apps, cfg, log)
		defer stopProbe()
		seenDeleted = func() bool { return probe.deletedWithin(stopWatchWait) }
	}
	if err := serve(ctx, cfg, a, podWarner(rec, uidOf), log); err != nil {
		return err
	}
	log.Info("stopping")
	return finish(cfg, a, api, seenDeleted, log)
}

// newInstaller builds the installer and names the backend the entry asks
// for. The entry is read and validated on every pass: a bad one is refused
// (the agent stays up, not ready, and says why) instead of chained.
func newInstaller(cfg *config, log *slog.Logger) (*install.Installer, string, error) {
	hp := meshconfig.HostPaths{
		Kubeconfig:   filepath.Join(cfg.hostStateDir, "kubeconfig"),
		AgentSocket:  filepath.Join(cfg.hostRunDir, "agent.sock"),
		ReportSocket: filepath.Join(cfg.hostRunDir, "report.sock"),
		ReadyMarker:  filepath.Join(cfg.hostRunDir, "ready"),
	}
	loadEntry := func() ([]byte, error) {
		raw, err := os.ReadFile(cfg.pluginConfig)
		if err != nil {
			return nil, fmt.Errorf("plugin config: %w", err)
		}
		return meshconfig.Load(raw, hp)
	}
	backendName := meshconfig.DefaultBackend
	if entry, err := loadEntry(); err != nil {
		log.Error("plugin config refused; the chain keeps its previous entry", "err", err)
	} else {
		backendName = install.EntryBackend(entry)
	}
	in, err := install.New(install.Config{
		BinDir:       cfg.cniBinDir,
		ConfDir:      cfg.cniConfDir,
		ConfFileName: cfg.confFileName,
		Chained:      cfg.chained,
		Subdir:       cfg.subdirChaining,
		MigrateFrom:  cfg.migrateFrom,
		HandBackTo:   cfg.handBackTo,
		StateDir:     cfg.stateDir,
		PluginBinary: cfg.pluginBinary,
		HelperBinary: cfg.podgetBinary,
		LoadEntry:    loadEntry,
		EntryDir:     filepath.Dir(cfg.pluginConfig),
		Preflight:    &install.Preflight{PrimaryBinaries: cfg.checkPrimaryBinaries, ToolDirs: toolDirs(cfg.hostToolDirs, log)},
		Log:          log,
	})
	return in, backendName, err
}

// apiAccess is what the agent has of the API server: kopts builds the
// plugin's kubeconfig (kerr says why it cannot), and client is nil when
// the agent has no API access (not in a pod): it still installs then, but
// Node status, repair and taint removal are off.
type apiAccess struct {
	kopts  kubeconfig.Options
	kerr   error
	client *clients
}

// nodes is nil without API access, which turns the Node status off.
func (api *apiAccess) nodes() corev1client.NodesGetter {
	if api.client == nil {
		return nil
	}
	return api.client.core
}

// connect reads the pod's service-account credentials and picks the
// plugin's token: its own short-lived ones, or (opted in) the agent's.
func connect(cfg *config, log *slog.Logger) (*apiAccess, error) {
	caPath := cfg.caPath
	if caPath == "" {
		caPath = filepath.Join(filepath.Dir(cfg.tokenPath), "ca.crt")
	}
	api := &apiAccess{}
	api.kopts, api.kerr = kubeconfig.FromEnv(cfg.tokenPath, caPath)
	if api.kerr == nil {
		var err error
		if api.client, err = newClients(api.kopts); err != nil {
			log.Warn("no Kubernetes client; Node status, repair and taint removal are off", "err", err)
		}
	} else {
		log.Warn("not running in a pod; Node status, repair and taint removal are off", "err", api.kerr)
	}
	client := api.client
	switch {
	case client == nil:
	case cfg.pluginServiceAccount != "" && cfg.namespace == "":
		return nil, fmt.Errorf("--plugin-service-account=%s needs --namespace (or POD_NAMESPACE)", cfg.pluginServiceAccount)
	case cfg.pluginServiceAccount != "":
		// The plugin gets its own short-lived tokens; ours stays here.
		// Bound to this node: the tokens carry its name (the chart's
		// admission policy refuses others) and die with the Node.
		api.kopts.Tokens = &kubeconfig.TokenRequester{Client: client.core, Namespace: cfg.namespace, Name: cfg.pluginServiceAccount, Node: cfg.nodeName}
	default:
		log.Warn("--allow-agent-token-for-plugin: the host kubeconfig carries the agent's own token")
	}
	return api, nil
}

// agentOptions wires the agent to the installer and, with API access, to
// its Node: status annotation, Events and the startup taint.
func agentOptions(ctx context.Context, cfg *config, in *install.Installer, backendName string, api *apiAccess, rec *recorder, log *slog.Logger) agent.Options {
	nodes := api.nodes()
	return agent.Options{
		Installer:    in,
		Kubeconfig:   filepath.Join(cfg.stateDir, "kubeconfig"),
		KubeOpts:     api.kopts,
		KubeOptsErr:  api.kerr,
		Marker:       filepath.Join(cfg.runDir, "ready"),
		HostPath:     hostPath,
		Backend:      backendName,
		Version:      version.Version,
		Publish:      publisher(nodes, cfg.nodeName),
		Published:    publishedStatus(nodes, cfg.nodeName),
		OnFirstReady: firstReady(ctx, api.client, cfg, retry.Backoff(30*time.Second), log),
		Event:        nodeEvents(rec, nodeRef(ctx, nodes, cfg.nodeName)),
		Log:          log,
	}
}

// serve runs the agent, its probe and metrics servers and the report
// socket until ctx ends or one of them fails.
func serve(ctx context.Context, cfg *config, a *agent.Agent, warn func(node.Event), log *slog.Logger) error {
	errc := make(chan error, 4)
	go func() { errc <- agent.ServeHTTP(ctx, cfg.probeAddr, a.ProbeHandler()) }()
	go func() { errc <- agent.ServeHTTP(ctx, cfg.metricsAddr, agent.MetricsHandler()) }()
	go func() {
		if err := agent.ServeReportsTo(ctx, filepath.Join(cfg.runDir, "report.sock"), log, warn); err != nil {
			// Metrics only: the plugin drops reports nobody reads.
			log.Error("report socket stopped", "err", err)
		}
	}()
	go func() { errc <- a.Run(ctx) }()

	select {
	case <-ctx.Done():
	case err := <-errc:
		if err != nil && ctx.Err() == nil {
			return err
		}
	}
	return nil
}

// finish uninstalls mesh-cni from the node when the release is gone
// (shouldUninstall), and otherwise leaves everything in place for the
// next agent: a restart or rolling update must not unmesh the node.
func finish(cfg *config, a *agent.Agent, api *apiAccess, seenDeleted func() bool, log *slog.Logger) error {
	var daemonSets appsv1client.DaemonSetsGetter
	if api.client != nil {
		daemonSets = api.client.apps
	}
	uninstall, why := shouldUninstall(daemonSets, cfg, seenDeleted)
	if !uninstall {
		log.Info("leaving mesh-cni installed", "why", why)
		return nil
	}
	log.Info("uninstalling mesh-cni from this node", "why", why)
	if err := a.Uninstall(); err != nil {
		return fmt.Errorf("uninstall: %w", err)
	}
	for _, sock := range []string{"report.sock", "agent.sock"} {
		_ = os.Remove(filepath.Join(cfg.runDir, sock))
	}
	if api.client != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := clearStatus(ctx, api.client.core, cfg.nodeName); err != nil {
			log.Warn("cannot clear the Node status annotation", "err", err)
		}
	}
	log.Info("uninstalled")
	return nil
}

// toolDirs keeps the dirs that exist: without the chart's read-only
// mounts of the host's dirs the agent cannot judge, and does not refuse.
func toolDirs(list string, log *slog.Logger) []string {
	var out []string
	for _, d := range strings.Split(list, ",") {
		if d = strings.TrimSpace(d); d == "" {
			continue
		}
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			out = append(out, d)
		}
	}
	if len(out) == 0 {
		log.Warn("none of the host tool dirs is mounted; not checking the backend's binaries", "dirs", list)
	}
	return out
}

// firstReady removes the startup taint once the node is ready, retrying
// on b until it is gone or ctx ends.
func firstReady(ctx context.Context, client *clients, cfg *config, b wait.Backoff, log *slog.Logger) func() {
	if client == nil || cfg.startupTaint == "" {
		return nil
	}
	return func() {
		err := retry.Until(ctx, b, func(ctx context.Context) error {
			return removeTaint(ctx, client.core, cfg.nodeName, cfg.startupTaint)
		}, func(err error, next time.Duration) {
			log.Warn("cannot remove the startup taint", "taint", cfg.startupTaint, "err", err, "retry_in", next)
		})
		if err == nil {
			log.Info("removed the startup taint", "taint", cfg.startupTaint)
		}
	}
}
