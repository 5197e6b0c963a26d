package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/mesh-cni/mesh-cni/pkg/check"
	"github.com/mesh-cni/mesh-cni/pkg/version"
)

func runCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mesh-cnictl check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		pre        = fs.Bool("pre", false, "check the cluster before installing")
		namespace  = check.DefaultNamespace
		output     = "text"
		kubeconfig = fs.String("kubeconfig", "", "kubeconfig file (default $KUBECONFIG, then ~/.kube/config)")
		kubeCtx    = fs.String("context", "", "kubeconfig context (default the current context)")
		chained    = fs.Bool("chained", true, "the install chains into the primary CNI config; false for the non-chained mode (Multus, OpenShift)")
		timeout    = fs.Duration("timeout", 10*time.Second, "limit for each API call")
	)
	fs.StringVar(&namespace, "n", namespace, "namespace mesh-cni is (to be) installed in")
	fs.StringVar(&namespace, "namespace", namespace, "namespace mesh-cni is (to be) installed in")
	fs.StringVar(&output, "o", output, "output format: text or json")
	fs.StringVar(&output, "output", output, "output format: text or json")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mesh-cnictl check: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if output != "text" && output != "json" {
		fmt.Fprintf(stderr, "mesh-cnictl check: -o must be text or json, not %q\n", output)
		return exitUsage
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	opts := check.Options{Namespace: namespace, Version: version.Version, Chained: *chained, Timeout: *timeout}
	rep := check.Report{Phase: "post", Namespace: namespace, Version: version.Version}
	checks := check.PostChecks()
	if *pre {
		rep.Phase, checks = "pre", check.PreChecks()
	}
	client, err := newClient(*kubeconfig, *kubeCtx, *timeout)
	if err != nil {
		rep.Checks = []check.Result{{Name: "kubeconfig loaded", Status: check.Fail, Message: err.Error(),
			Hint: "pass --kubeconfig, set $KUBECONFIG, or check ~/.kube/config"}}
	} else {
		rep.Checks = check.Run(ctx, check.NewCluster(client, opts), checks)
	}
	rep.OK = check.Failed(rep.Checks) == 0
	write := check.WriteText
	if output == "json" {
		write = check.WriteJSON
	}
	if err := write(stdout, rep); err != nil {
		fmt.Fprintln(stderr, "mesh-cnictl check:", err)
		return exitFailed
	}
	if !rep.OK {
		return exitFailed
	}
	return 0
}

// newClient loads the kubeconfig the way kubectl does.
func newClient(path, context string, timeout time.Duration) (kubernetes.Interface, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules,
		&clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.Timeout = timeout
	cfg.UserAgent = "mesh-cnictl/" + version.Version
	return kubernetes.NewForConfig(cfg)
}
