package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/mesh-cni/mesh-cni/internal/agent/kubeconfig"
)

// agentsReadyCommand is the subcommand the chart's `helm test` runs:
// it reads the agent DaemonSet's status (one `get`, the only permission the
// test's ServiceAccount has) and exits 0 only when every node the DaemonSet
// schedules on runs an updated, ready agent.
const agentsReadyCommand = "agents-ready"

func agentsReady(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mesh-cni-agent "+agentsReadyCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	ns := fs.String("namespace", os.Getenv("POD_NAMESPACE"), "the agent DaemonSet's namespace")
	name := fs.String("daemonset", "mesh-cni", "the agent DaemonSet")
	tokenPath := fs.String("token-path", "/var/run/secrets/kubernetes.io/serviceaccount/token", "projected service-account token")
	caPath := fs.String("ca-path", "", "API server CA bundle (empty: ca.crt next to the token)")
	timeout := fs.Duration("timeout", 30*time.Second, "bound on each API request")
	wait := fs.Duration("wait", 3*time.Minute, "how long agents may take to become ready (right after an install or upgrade they are still starting)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mesh-cni-agent %s: unexpected argument %q\n", agentsReadyCommand, fs.Arg(0))
		return 2
	}
	if *ns == "" {
		fmt.Fprintf(stderr, "mesh-cni-agent %s: --namespace is empty (and POD_NAMESPACE unset)\n", agentsReadyCommand)
		return 2
	}
	if *caPath == "" {
		*caPath = filepath.Join(filepath.Dir(*tokenPath), "ca.crt")
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "mesh-cni-agent %s: %v\n", agentsReadyCommand, err)
		return 1
	}
	o, err := kubeconfig.FromEnv(*tokenPath, *caPath)
	if err != nil {
		return fail(err)
	}
	c, err := newClients(o)
	if err != nil {
		return fail(err)
	}
	sum, err := waitRollout(context.Background(), c.apps, *ns, *name, *timeout, *wait, func(sum string) {
		fmt.Fprintf(stdout, "waiting: %s\n", sum)
	})
	if err != nil {
		return fail(err)
	}
	fmt.Fprintf(stdout, "%s: every node's agent is ready\n", sum)
	return 0
}
