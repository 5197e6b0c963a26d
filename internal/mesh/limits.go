package mesh

import (
	"fmt"
	"slices"
	"strings"
)

// Caps on what one pod's annotations may ask of the plugin, checked before
// any of them is parsed. The plugin runs on every kubelet retry inside the
// runtime's cgroup, so a pod must not be able to make it build tens of
// thousands of rules or parse megabytes of YAML. Each cap is far above what
// the meshes' injectors and their documented settings produce; a pod over
// one fails ADD (code 7) naming the annotation. These numbers are stated in
// docs/configuration.md and README.md of this package.
const (
	// MaxAnnotationBytes caps each list or single-value annotation the
	// meshes define (ports, CIDRs, interfaces, UIDs, versions, modes).
	// The injectors write a handful of items (Linkerd's default
	// skip-outbound-ports is 26 bytes, Istio's injector copies the
	// values' includeIPRanges, a few CIDRs); 4 KiB holds 256 IPv4 CIDRs or
	// about 100 IPv6 ones.
	MaxAnnotationBytes = 4 << 10
	// MaxDocumentBytes caps the annotations that hold a YAML or JSON
	// document: proxy.istio.io/config (a ProxyConfig override), Kuma's
	// transparent-proxy config, Consul's redirect-traffic-config and
	// Istio's injection status. Injectors write well under 2 KiB (the
	// status lists container and volume names; Consul's config is one
	// JSON line of a dozen keys); 16 KiB is a full ProxyConfig with
	// room to spare, and keeps a hostile document's decode to a few MiB.
	MaxDocumentBytes = 16 << 10
	// MaxListItems caps the items of one list: per annotation, every
	// comma- or semicolon-separated item counts (Kuma's per-UID
	// exclusions nest a port list inside each entry, all counted), and
	// each list inside a document, or a chain entry setting, too.
	// The meshes' own lists are a few items long; 256 leaves room for
	// long hand-written skip lists. With it the largest pod the caps
	// allow stays within a few thousand rules (docs/configuration.md has
	// the measured cost).
	MaxListItems = 256
	// MaxDocumentItems caps the lines and commas of a document annotation,
	// which bounds the items of all its lists together before it is
	// decoded (a UID list inside it becomes one rule per UID). A full
	// Kuma config is about 60 lines, Consul's one line of a dozen commas.
	MaxDocumentItems = 4 * MaxListItems
)

// documentAnnotations hold a YAML or JSON document (MaxDocumentBytes).
var documentAnnotations = []string{IstioProxyConfig, IstioStatus, KumaConfig, ConsulRedirectConfig}

// meshPrefixes: which mesh reads an annotation, by key prefix.
var meshPrefixes = map[string][]string{
	Linkerd: {"linkerd.io/", "config.linkerd.io/"},
	Istio:   {"sidecar.istio.io/", "traffic.sidecar.istio.io/", "proxy.istio.io/", "inject.istio.io/"},
	Kuma:    {"kuma.io/", "traffic.kuma.io/"},
	Consul:  {"consul.hashicorp.com/"},
}

// checkLimits refuses a pod whose annotations read by an enabled mesh are
// over the caps, before any is parsed.
func (s *Set) checkLimits(ann map[string]string) error {
	for _, key := range HonouredAnnotations {
		v, ok := ann[key]
		if !ok || !s.reads(key) {
			continue
		}
		if err := annotationWithinLimits(key, v); err != nil {
			return annErr(key, v, err)
		}
	}
	return nil
}

func (s *Set) reads(key string) bool {
	for _, name := range s.names {
		for _, p := range meshPrefixes[name] {
			if strings.HasPrefix(key, p) {
				return true
			}
		}
	}
	return false
}

func annotationWithinLimits(key, v string) error {
	if slices.Contains(documentAnnotations, key) {
		if len(v) > MaxDocumentBytes {
			return fmt.Errorf("%d bytes, more than the %d an annotation holding a document may have", len(v), MaxDocumentBytes)
		}
		if n := strings.Count(v, ",") + strings.Count(v, "\n") + 1; n > MaxDocumentItems {
			return fmt.Errorf("%d lines and items, more than the %d a document may have", n, MaxDocumentItems)
		}
		return nil
	}
	if len(v) > MaxAnnotationBytes {
		return fmt.Errorf("%d bytes, more than the %d a list annotation may have", len(v), MaxAnnotationBytes)
	}
	if n := strings.Count(v, ",") + strings.Count(v, ";") + 1; n > MaxListItems {
		return fmt.Errorf("%d items, more than the %d a list may have", n, MaxListItems)
	}
	return nil
}

// checkItems caps a list before it is split: n separators make n+1 items.
func checkItems(s string) error {
	if n := strings.Count(s, ",") + 1; n > MaxListItems {
		return fmt.Errorf("list of %d items, more than the %d a list may have", n, MaxListItems)
	}
	return nil
}
