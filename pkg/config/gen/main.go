// Command gen writes the files generated from the chain entry's key tables
// (pkg/config Keys and MeshKeys, and the profiles' defaults in pkg/mesh):
// the plugin settings' part of the chart's values.schema.json and
// docs/configuration.md. Run it with `go generate ./pkg/config`;
// TestGeneratedFiles fails while either file is out of date.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mesh-cni/mesh-cni/pkg/config"
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
	schema := filepath.Join(root, config.SchemaFile)
	old, err := os.ReadFile(schema)
	if err != nil {
		return err
	}
	b, err := config.SpliceSchema(old)
	if err != nil {
		return err
	}
	if err := os.WriteFile(schema, b, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(root, config.DocFile), config.Doc(), 0o644)
}
