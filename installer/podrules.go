package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mesh-cni/mesh-cni/internal/agent"
	"github.com/mesh-cni/mesh-cni/internal/agent/kubeconfig"
	"github.com/mesh-cni/mesh-cni/internal/agent/podrules"
)

// podRulesCommand runs the read-only pod-rules endpoint of
// "kubectl mesh-cni explain --check" (internal/agent/podrules). The chart runs it as a
// container of its own: it needs CAP_SYS_ADMIN (a netlink socket in a pod's
// netns) and CAP_NET_ADMIN (nf_tables dumps), which the agent container,
// which writes host files, does not get.
const podRulesCommand = "pod-rules"

type podRulesConfig struct {
	nodeName, host, netnsDir string
	tokenPath, caPath        string
	port                     int
}

func parsePodRulesFlags(args []string) (*podRulesConfig, error) {
	c := &podRulesConfig{}
	fs := flag.NewFlagSet("mesh-cni-agent "+podRulesCommand, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.nodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name")
	fs.StringVar(&c.host, "host", os.Getenv("POD_IP"), "the node's own address to listen on (the chart passes status.podIP); never every address")
	fs.IntVar(&c.port, "port", 9199, "port to listen on")
	fs.StringVar(&c.netnsDir, "netns-dir", "/host/var/run/netns", "container path of the runtime's netns dir (read-only mount)")
	fs.StringVar(&c.tokenPath, "token-path", "/var/run/secrets/kubernetes.io/serviceaccount/token", "projected service-account token")
	fs.StringVar(&c.caPath, "ca-path", "", "API server CA bundle (empty: ca.crt next to the token)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if c.port < 1 || c.port > 65535 {
		return nil, fmt.Errorf("--port=%d: want 1 to 65535", c.port)
	}
	// Unauthenticated (the API server's pods/proxy passes no credentials
	// on): one address of the node, never all of them.
	if ip, err := netip.ParseAddr(c.host); err != nil || ip.IsUnspecified() {
		return nil, fmt.Errorf("--host=%q: want the node's own IP address (the chart passes status.podIP), not a name, empty or every address", c.host)
	}
	if c.nodeName == "" {
		return nil, errors.New("--node-name (or NODE_NAME) is needed: only this node's pods are answered for")
	}
	return c, nil
}

func (c *podRulesConfig) addr() string { return net.JoinHostPort(c.host, strconv.Itoa(c.port)) }

func podRulesMain(args []string, stderr io.Writer) int {
	c, err := parsePodRulesFlags(args)
	if err != nil {
		fmt.Fprintf(stderr, "mesh-cni-agent %s: %v\n", podRulesCommand, err)
		return 2
	}
	log := newLogger("info").With("component", podRulesCommand)
	caPath := c.caPath
	if caPath == "" {
		caPath = filepath.Join(filepath.Dir(c.tokenPath), "ca.crt")
	}
	kopts, err := kubeconfig.FromEnv(c.tokenPath, caPath)
	if err != nil {
		log.Error("no API access", "err", err)
		return 1
	}
	client, err := newClients(kopts)
	if err != nil {
		log.Error("no API client", "err", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	h := podrules.NewHandler(podrules.Handler{Node: c.nodeName, NetnsDir: c.netnsDir,
		Pod:   podGetter(client),
		Entry: nodeEntry(client, c.nodeName)})
	servePodRules(ctx, c.addr(), h, log)
	return 0
}

// podRulesRetry is how long a listener that failed waits to try again.
var podRulesRetry = 30 * time.Second

// servePodRules serves h on addr until ctx ends. A port taken by something
// else must not make the agent's pod unready (this container has no probe,
// so running is ready): it says so and tries again, as long as it takes.
func servePodRules(ctx context.Context, addr string, h http.Handler, log *slog.Logger) {
	for {
		log.Info("serving pod rules", "addr", addr)
		err := agent.ServeHTTP(ctx, addr, h)
		if err == nil || ctx.Err() != nil {
			return
		}
		log.Error("pod-rules endpoint down; trying again", "err", err, "in", podRulesRetry)
		select {
		case <-ctx.Done():
			return
		case <-time.After(podRulesRetry):
		}
	}
}

// podGetter GETs a pod (nil when there is none).
func podGetter(client *clients) func(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	return func(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
		p, err := client.core.Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return p, err
	}
}

// nodeEntry reads the chain entry the agent publishes in its Node status
// annotation: the one explain shows, and the one the plugin runs.
func nodeEntry(client *clients, node string) func(ctx context.Context) ([]byte, error) {
	return func(ctx context.Context) ([]byte, error) {
		n, err := client.core.Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		raw := n.Annotations[agent.StatusAnnotation]
		if raw == "" {
			return nil, nil
		}
		var st agent.Status
		if err := json.Unmarshal([]byte(raw), &st); err != nil {
			return nil, fmt.Errorf("annotation %s: %w", agent.StatusAnnotation, err)
		}
		return st.Entry, nil
	}
}
