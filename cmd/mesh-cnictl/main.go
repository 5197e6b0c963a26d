// Command mesh-cnictl checks a cluster before and after mesh-cni is
// installed, and explains what the plugin does for a pod. It is a separate
// binary so the plugin itself stays small and free of client-go.
//
// The same binary is the kubectl plugin kubectl-mesh_cni ("kubectl
// mesh-cni"): it is built on cobra and client-go's clientcmd, as kubectl
// is, so the kube flags (--kubeconfig, --context, -n, --as, ...) and the -o
// formats mean what they mean to kubectl. The name it is
// run under changes only how its help names it.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
)

// Exit codes: 1 a check failed (or the cluster could not be read), 2 the
// command line is wrong, 3 explain --check found rules missing or extra
// (exitRulesDiffer).
const (
	exitFailed = 1
	exitUsage  = 2
)

// progName is the name the binary runs under.
var progName = "mesh-cnictl"

// PluginName is the kubectl plugin's executable name: kubectl runs it for
// "kubectl mesh-cni" (a dash in a plugin's command is an underscore in
// its file name).
const PluginName = "kubectl-mesh_cni"

func main() {
	if len(os.Args) > 0 {
		progName = filepath.Base(os.Args[0])
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// usageError is a wrong command line: exit 2 with the usage.
type usageError struct{ error }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// failed is a run that printed its verdict and only needs exit 1.
var errFailed = errors.New("failed")

// errRulesDiffer is explain --check's verdict, printed: exit 3.
var errRulesDiffer = errors.New("rules differ")

func run(args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	if errors.Is(err, errFailed) {
		return exitFailed
	}
	if errors.Is(err, errRulesDiffer) {
		return exitRulesDiffer
	}
	var ue usageError
	if errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command") {
		fmt.Fprintf(stderr, "%s: %v\n\n", root.Name(), err)
		cmd.SetOut(stderr)
		_ = cmd.Usage() // the error above is the message
		return exitUsage
	}
	fmt.Fprintf(stderr, "%s: %v\n", root.Name(), err)
	return exitFailed
}

// newRoot builds the command tree; each run builds its own, so nothing is
// shared between runs (the tests run many in one process).
func newRoot(stdout, stderr io.Writer) *cobra.Command {
	name, display := "mesh-cnictl", "mesh-cnictl"
	if strings.HasPrefix(progName, "kubectl-") {
		name, display = PluginName, "kubectl mesh-cni"
	}
	kube := newKubeFlags()
	root := &cobra.Command{
		Use:   name,
		Short: "Check and explain mesh-cni",
		Long: display + ` checks a cluster before and after mesh-cni is installed, explains what
the plugin does for a pod (from a manifest, or a live pod and the chain
entry the agent on its node runs), and prints the client's and the
agents' versions.`,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: display},
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usagef("a command is needed")
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	kube.addFlags(root.PersistentFlags())
	root.AddCommand(newCheck(kube), newExplain(kube), newVersion(kube))
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			c.AddCommand(newKubectlShim())
		}
	}
	return root
}

// CompletionShim is the executable kubectl (1.26 and later) runs to
// complete "kubectl mesh-cni ...": kubectl_complete-<plugin> on the PATH,
// with a dash of the plugin's name as an underscore.
const CompletionShim = "kubectl_complete-mesh_cni"

// newKubectlShim prints CompletionShim: it hands the words to the
// plugin's own completion (cobra's __complete), so kubectl completes the
// plugin's commands, flags and pod names as the shell scripts do.
func newKubectlShim() *cobra.Command {
	return &cobra.Command{
		Use:   "kubectl",
		Short: "Generate " + CompletionShim + ", which kubectl runs to complete kubectl mesh-cni",
		Long: `Prints the script kubectl (1.26 and later) runs to complete
"kubectl mesh-cni ..." when it is on the PATH as ` + CompletionShim + `:

  kubectl mesh-cni completion kubectl > ~/.local/bin/` + CompletionShim + `
  chmod +x ~/.local/bin/` + CompletionShim + `

kubectl's own completion (kubectl completion bash|zsh|fish) must be set up.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "#!/bin/sh\n# kubectl runs this to complete \"kubectl mesh-cni ...\" (kubectl 1.26 and later).\nexec %s __complete \"$@\"\n", PluginName)
			return err
		},
	}
}

// noArgs refuses positional arguments as a usage error.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("unexpected argument %q", args[0])
	}
	return nil
}
