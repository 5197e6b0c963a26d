package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// The SBOM of a Go binary (this test's own) names it with its checksum and
// the modules linked into it, with purls; the same input gives the same
// bytes; a file that is not a Go binary is an error.
func TestSBOM(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-name", "img", "-version", "v1.0.0", "-platform", "linux/amd64", "-created", "2026-01-02T03:04:05Z", self}
	var a, b bytes.Buffer
	if err := run(args, &a); err != nil {
		t.Fatal(err)
	}
	if err := run(args, &b); err != nil || !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Errorf("second run differs (%v)", err)
	}
	var doc document
	if err := json.Unmarshal(a.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.SPDXVersion != "SPDX-2.3" || doc.Name != "img-v1.0.0-linux-amd64" || doc.CreationInfo.Created != "2026-01-02T03:04:05Z" {
		t.Errorf("document: %s %s %s", doc.SPDXVersion, doc.Name, doc.CreationInfo.Created)
	}
	byName := map[string]pkg{}
	for _, p := range doc.Packages {
		byName[p.Name] = p
	}
	if p := byName[filepath.Base(self)]; len(p.Checksums) != 1 || len(p.Checksums[0].Value) != 64 {
		t.Errorf("the binary's package has no SHA256: %+v", p)
	}
	if p := byName["stdlib"]; len(p.ExternalRefs) != 1 || p.ExternalRefs[0].Locator == "" {
		t.Errorf("no stdlib package with a purl: %+v", p)
	}
	notGo := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notGo, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{notGo}, &bytes.Buffer{}); err == nil {
		t.Error("a non-Go file gave an SBOM")
	}
}
