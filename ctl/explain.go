package main

import (
	"io"

	"github.com/mesh-cni/mesh-cni/pkg/explain"
)

// runExplain is "what would ADD do for this pod". It lives here, not in the
// plugin, so the binary the runtime execs per pod does not carry a manifest
// parser; one tool answers both "is the node right" and "what would ADD do".
func runExplain(args []string, stdout, stderr io.Writer) int {
	return explain.Run(args, stdout, stderr)
}
