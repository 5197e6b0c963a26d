// Command mesh-cnictl checks a cluster before and after mesh-cni is
// installed, and explains what the plugin does for a pod. It is a separate
// binary so the plugin itself stays small and free of client-go.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/mesh-cni/mesh-cni/pkg/version"
)

// Exit codes: 1 a check failed, 2 the command line is wrong.
const (
	exitFailed = 1
	exitUsage  = 2
)

const usage = `mesh-cnictl: check and explain mesh-cni

Usage:
  mesh-cnictl check [--pre] [-n namespace] [-o text|json] [--kubeconfig file] [--context name] [--chained=false]
  mesh-cnictl explain ...   what ADD would do for a pod (mesh-cnictl explain -h)
  mesh-cnictl version
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "check":
		return runCheck(args[1:], stdout, stderr)
	case "explain":
		return runExplain(args[1:], stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "mesh-cnictl "+version.String())
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "mesh-cnictl: unknown command %q\n\n%s", args[0], usage)
		return exitUsage
	}
}
