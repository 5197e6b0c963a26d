// Command gen writes internal/ctl/check/testdata/cilium-config/*.yaml: Cilium's
// chart rendered for each ciliumcfg.Case. Run it with `go generate
// ./internal/ctl/check`; it downloads the Cilium module when the module cache lacks
// it. TestCiliumConfigsCurrent fails while a file is out of date.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/ciliumcfg"
)

func main() {
	root := flag.String("root", ".", "repository root")
	flag.Parse()
	if err := run(*root); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(root string) error {
	v, err := ciliumcfg.Version(root)
	if err != nil {
		return err
	}
	dir, err := ciliumcfg.ChartDir(root, true)
	if err != nil {
		return err
	}
	out := filepath.Join(root, "pkg", "check", "testdata", "cilium-config")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	old, _ := filepath.Glob(filepath.Join(out, "*.yaml"))
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			return err
		}
	}
	for _, c := range ciliumcfg.Cases {
		s, err := ciliumcfg.Render(root, dir, v, c)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, c.Name+".yaml"), []byte(s), 0o644); err != nil {
			return err
		}
	}
	return nil
}
