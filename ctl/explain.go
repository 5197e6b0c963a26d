package main

import (
	"io"

	"github.com/mesh-cni/mesh-cni/pkg/explain"
)

// runExplain is "mesh-cni explain" in this binary too, so one tool in the
// image answers both "is the node right" and "what would ADD do".
func runExplain(args []string, stdout, stderr io.Writer) int {
	return explain.Run(args, stdout, stderr)
}
