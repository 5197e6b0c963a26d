// Command gen writes the files generated from the chain entry's key tables
// (internal/config Keys and MeshKeys, and the profiles' defaults in internal/mesh):
// the plugin settings' part of the chart's values.schema.json,
// docs/configuration.md, the profiles' defaults the chart's test reads and the
// shared namespaces the chart refuses. Run it with `go generate ./internal/config`;
// TestGeneratedFiles fails while either file is out of date.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mesh-cni/mesh-cni/internal/config"
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
	if err := os.WriteFile(filepath.Join(root, config.DocFile), config.Doc(), 0o644); err != nil {
		return err
	}
	profiles := filepath.Join(root, config.ProfilesFile)
	if err := os.MkdirAll(filepath.Dir(profiles), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(profiles, config.ProfileDefaults(), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(root, config.SharedNamespacesFile), config.SharedNamespacesJSON(), 0o644)
}
