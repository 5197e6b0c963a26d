// Command sbom writes an SPDX 2.3 JSON document for an image's Go binaries,
// from the module list the Go linker embeds in each (debug/buildinfo: the
// same data `go version -m` prints), so it names exactly what was linked:
//
//	go run ./hack/sbom -name mesh-cni -version v0.2.0 -platform linux/arm64 \
//	  -created 2026-11-26T00:00:00Z bin/linux-arm64/* >sbom.spdx.json
//
// Same inputs, same bytes: packages are sorted and the document namespace
// and creation time come from the flags, not the clock.
package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

type checksum struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"`
}

type externalRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type pkg struct {
	Name             string        `json:"name"`
	SPDXID           string        `json:"SPDXID"`
	Version          string        `json:"versionInfo,omitempty"`
	Supplier         string        `json:"supplier,omitempty"`
	DownloadLocation string        `json:"downloadLocation"`
	FilesAnalyzed    bool          `json:"filesAnalyzed"`
	Checksums        []checksum    `json:"checksums,omitempty"`
	ExternalRefs     []externalRef `json:"externalRefs,omitempty"`
	PrimaryPurpose   string        `json:"primaryPackagePurpose,omitempty"`
}

type relationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

type document struct {
	SPDXVersion  string `json:"spdxVersion"`
	DataLicense  string `json:"dataLicense"`
	SPDXID       string `json:"SPDXID"`
	Name         string `json:"name"`
	Namespace    string `json:"documentNamespace"`
	CreationInfo struct {
		Created  string   `json:"created"`
		Creators []string `json:"creators"`
	} `json:"creationInfo"`
	Packages      []pkg          `json:"packages"`
	Relationships []relationship `json:"relationships"`
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "sbom:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("sbom", flag.ContinueOnError)
	name := fs.String("name", "mesh-cni", "image name")
	version := fs.String("version", "", "release version")
	platform := fs.String("platform", "", "image platform, os/arch")
	created := fs.String("created", "1970-01-01T00:00:00Z", "creation time (RFC 3339), e.g. the commit's")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("no binaries given")
	}
	doc := document{SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT"}
	doc.Name = fmt.Sprintf("%s-%s-%s", *name, *version, strings.ReplaceAll(*platform, "/", "-"))
	doc.Namespace = "https://github.com/mesh-cni/mesh-cni/spdx/" + doc.Name
	doc.CreationInfo.Created = *created
	doc.CreationInfo.Creators = []string{"Tool: mesh-cni-hack-sbom"}
	image := pkg{Name: *name, SPDXID: "SPDXRef-Image", Version: *version, DownloadLocation: "NOASSERTION", PrimaryPurpose: "CONTAINER"}
	doc.Packages = append(doc.Packages, image)
	doc.Relationships = append(doc.Relationships, relationship{"SPDXRef-DOCUMENT", "DESCRIBES", image.SPDXID})

	g := graph{modules: map[string]pkg{}, uses: map[string]map[string]bool{}}
	bins := fs.Args()
	sort.Strings(bins)
	for _, path := range bins {
		bin, err := g.addBinary(path, *version)
		if err != nil {
			return err
		}
		doc.Packages = append(doc.Packages, bin)
		doc.Relationships = append(doc.Relationships, relationship{image.SPDXID, "CONTAINS", bin.SPDXID})
	}
	g.appendTo(&doc)
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

// graph is what the binaries link: each module once, however many
// binaries share it, and which binary uses which.
type graph struct {
	modules map[string]pkg             // path@version -> package
	uses    map[string]map[string]bool // binary's SPDXID -> module SPDXIDs
}

// addBinary reads one binary's embedded module list into g and returns the
// binary's own package.
func (g *graph) addBinary(path, version string) (pkg, error) {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return pkg{}, fmt.Errorf("%s: %w", path, err)
	}
	sum, err := fileSHA256(path)
	if err != nil {
		return pkg{}, err
	}
	base := filepath.Base(path)
	bin := pkg{Name: base, SPDXID: "SPDXRef-File-" + spdxID(base), Version: version, DownloadLocation: "NOASSERTION",
		Checksums: []checksum{{"SHA256", sum}}, PrimaryPurpose: "APPLICATION"}
	g.uses[bin.SPDXID] = map[string]bool{}
	deps := append([]*debugModule{{bi.Main.Path, bi.Main.Version}}, toModules(bi)...)
	deps = append(deps, &debugModule{"stdlib", strings.TrimPrefix(bi.GoVersion, "go")})
	for _, m := range deps {
		if m.path == "" {
			continue
		}
		key := m.path + "@" + m.version
		if _, ok := g.modules[key]; !ok {
			g.modules[key] = modulePkg(m, key)
		}
		g.uses[bin.SPDXID][g.modules[key].SPDXID] = true
	}
	return bin, nil
}

// modulePkg is the SPDX package of one Go module, named by its purl.
func modulePkg(m *debugModule, key string) pkg {
	p := pkg{Name: m.path, SPDXID: "SPDXRef-Package-" + spdxID(key), Version: m.version,
		DownloadLocation: "NOASSERTION", PrimaryPurpose: "LIBRARY"}
	purl := "pkg:golang/" + m.path + "@" + m.version
	if m.path == "stdlib" {
		purl = "pkg:golang/stdlib@" + m.version
	}
	p.ExternalRefs = []externalRef{{"PACKAGE-MANAGER", "purl", purl}}
	return p
}

// appendTo adds the modules and the DEPENDS_ON relationships to doc, each
// sorted so that the same binaries give the same bytes.
func (g *graph) appendTo(doc *document) {
	keys := make([]string, 0, len(g.modules))
	for k := range g.modules {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		doc.Packages = append(doc.Packages, g.modules[k])
	}
	binIDs := make([]string, 0, len(g.uses))
	for id := range g.uses {
		binIDs = append(binIDs, id)
	}
	sort.Strings(binIDs)
	for _, b := range binIDs {
		deps := make([]string, 0, len(g.uses[b]))
		for d := range g.uses[b] {
			deps = append(deps, d)
		}
		sort.Strings(deps)
		for _, d := range deps {
			doc.Relationships = append(doc.Relationships, relationship{b, "DEPENDS_ON", d})
		}
	}
}

type debugModule struct{ path, version string }

func toModules(bi *buildinfo.BuildInfo) []*debugModule {
	var ms []*debugModule
	for _, d := range bi.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		ms = append(ms, &debugModule{d.Path, d.Version})
	}
	return ms
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// spdxID keeps the characters SPDX allows in an identifier: letters,
// digits, "." and "-".
func spdxID(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-':
			return r
		}
		return '-'
	}, s)
}
