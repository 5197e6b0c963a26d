// Command kind-thaw thaws the frozen cgroups that keep a kind cluster's
// nodes from stopping (internal/testsupport/kindnode); make demo-down runs it when a delete
// fails.
package main

import (
	"fmt"
	"os"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/kindnode"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: kind-thaw CLUSTER")
		os.Exit(2)
	}
	n, err := kindnode.ThawCluster(os.Args[1])
	fmt.Fprintf(os.Stderr, "kind-thaw: thawed %d cgroups in cluster %s\n", n, os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "kind-thaw:", err)
		os.Exit(1)
	}
}
