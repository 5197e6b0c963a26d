package main

import (
	"os"
	"os/signal"
	"time"

	"github.com/spf13/cobra"

	"github.com/mesh-cni/mesh-cni/internal/ctl/check"
	"github.com/mesh-cni/mesh-cni/internal/version"
)

func newCheck(kube *kubeFlags) *cobra.Command {
	var (
		pre     bool
		chained = true
		timeout = 10 * time.Second
	)
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check the cluster before (--pre) or after mesh-cni is installed",
		Long: `Runs the checks, one line each (✓, ✗, or ‼ for a warning), with the nodes or
pods involved and a hint below a failure. -n names the namespace mesh-cni is
(to be) installed in: default ` + check.DefaultNamespace + `, not the kubeconfig's namespace.
-o wide also lists the details of the checks that passed. Exit code 0 when
every check passes, 1 when one fails, 2 for a wrong command line.`,
		Example: "  mesh-cnictl check\n  mesh-cnictl check --pre -n linkerd-cni -o json",
		Args:    noArgs,
	}
	out := addOutput(cmd)
	cmd.Flags().BoolVar(&pre, "pre", pre, "check the cluster before installing")
	cmd.Flags().BoolVar(&chained, "chained", chained, "the install chains into the primary CNI config; false for the non-chained mode (Multus, OpenShift)")
	cmd.Flags().DurationVar(&timeout, "timeout", timeout, "limit for each API call")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := out.validate(); err != nil {
			return err
		}
		namespace := kube.namespace()
		if namespace == "" {
			namespace = check.DefaultNamespace
		}
		ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
		defer stop()
		opts := check.Options{Namespace: namespace, Version: version.Version, Chained: chained, Timeout: timeout}
		rep := check.Report{Phase: "post", Namespace: namespace, Version: version.Version}
		checks := check.PostChecks()
		if pre {
			rep.Phase, checks = "pre", check.PreChecks()
		}
		client, err := newClient(kube, timeout)
		if err != nil {
			rep.Checks = []check.Result{{Name: "kubeconfig loaded", Status: check.Fail, Message: err.Error(),
				Hint: "pass --kubeconfig, set $KUBECONFIG, or check ~/.kube/config"}}
		} else {
			rep.Checks = check.Run(ctx, check.NewCluster(client, opts), checks)
		}
		rep.OK = check.Failed(rep.Checks) == 0
		w := cmd.OutOrStdout()
		switch text, wide := out.text(); {
		case wide:
			err = check.WriteWide(w, rep)
		case text:
			err = check.WriteText(w, rep)
		default:
			if rep.Checks == nil {
				rep.Checks = []check.Result{}
			}
			err = out.print(w, "CheckReport", rep)
		}
		if err != nil {
			return err
		}
		if !rep.OK {
			return errFailed
		}
		return nil
	}
	return cmd
}
