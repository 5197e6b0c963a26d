package main

import (
	"fmt"
	"io"

	"github.com/mesh-cni/mesh-cni/pkg/explain"
	bv "github.com/mesh-cni/mesh-cni/pkg/version"
)

func isSubcommand(arg string) bool {
	switch arg {
	case "explain", "version", "help", "-h", "--help":
		return true
	}
	return false
}

// runCLI runs a subcommand and returns the exit code.
func runCLI(args []string, stdout, stderr io.Writer) int {
	switch args[0] {
	case "explain":
		return explain.Run(args[1:], stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "mesh-cni", bv.Version)
		return 0
	default:
		fmt.Fprint(stdout, usage)
		return 0
	}
}

const usage = `mesh-cni: chained CNI plugin for service-mesh traffic redirection.

Run by the container runtime with CNI_COMMAND set. As a command:
  mesh-cni explain [flags]   print the rules ADD would write for a pod
                             (mesh-cni explain -h for its flags)
  mesh-cni version           print the version
`
