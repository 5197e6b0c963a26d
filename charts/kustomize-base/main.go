// Command kustomize-base regenerates kustomize/base (and the generated
// resources of kustomize/components) from charts/mesh-cni, rendered with a
// fixed release name and namespace. Run in charts/ (make kustomize-base):
//
//	go run ./kustomize-base
package main

import (
	"fmt"
	"os"

	"github.com/mesh-cni/mesh-cni/charts/chart"
)

func main() {
	files, err := chart.GenerateKustomize("mesh-cni")
	if err == nil {
		err = chart.WriteGenerated("../kustomize", files)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kustomize-base:", err)
		os.Exit(1)
	}
	fmt.Printf("kustomize-base: wrote %d files under kustomize/\n", len(files))
}
