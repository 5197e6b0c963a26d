// Package docsection writes one benchmark's section of a Markdown file
// that several benchmarks share (docs/benchmarks.md): the section sits
// between the markers <!-- name:start --> and <!-- name:end -->.
package docsection

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// Markers are the start and end markers of the section called name.
func Markers(name string) (start, end string) {
	return "<!-- " + name + ":start -->", "<!-- " + name + ":end -->"
}

// Write replaces section name of the Markdown file at path (between its
// markers), or appends it when the file has none. A file with only one of
// the markers, or with them out of order, is left alone.
func Write(path, name, section string) error {
	start, end := Markers(name)
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	doc := string(old)
	block := start + "\n" + section + end + "\n"
	i, j := strings.Index(doc, start), strings.Index(doc, end)
	switch {
	case i >= 0 && j > i:
		rest := strings.TrimPrefix(doc[j+len(end):], "\n")
		doc = doc[:i] + block + rest
	case i >= 0 || j >= 0:
		return fmt.Errorf("%s: %s and %s are not a pair in order; not writing", path, start, end)
	case doc == "":
		doc = "# Benchmarks\n\n" + block
	default:
		doc = strings.TrimRight(doc, "\n") + "\n\n" + block
	}
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
