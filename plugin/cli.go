package main

import (
	"fmt"
	"io"

	bv "github.com/mesh-cni/mesh-cni/internal/version"
)

func isSubcommand(arg string) bool {
	switch arg {
	case "explain", "version", "help", "-h", "--help":
		return true
	}
	return false
}

// runCLI runs a subcommand and returns the exit code. "explain" lives in
// mesh-cnictl: its manifest parsing would grow a binary the runtime execs
// for every pod, so here it only says where to find it.
func runCLI(args []string, stdout, stderr io.Writer) int {
	switch args[0] {
	case "explain":
		fmt.Fprintln(stderr, "mesh-cni explain moved to mesh-cnictl: run \"mesh-cnictl explain\" with the same flags (mesh-cnictl explain -h)")
		return 2
	case "version":
		fmt.Fprintln(stdout, "mesh-cni", bv.String())
		return 0
	default:
		fmt.Fprint(stdout, usage)
		return 0
	}
}

const usage = `mesh-cni: chained CNI plugin for service-mesh traffic redirection.

Run by the container runtime with CNI_COMMAND set. As a command:
  mesh-cni version           print the version and commit

To see the rules ADD would write for a pod: mesh-cnictl explain.
`
