package main

import (
	"fmt"
	"io"
)

func runExplain(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "mesh-cnictl explain: not built in yet")
	return exitUsage
}
