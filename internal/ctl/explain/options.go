package explain

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// KV is a repeatable KEY=VALUE flag.
type KV map[string]string

func (kv KV) String() string { return "" }
func (kv KV) Type() string   { return "KEY=VALUE" }
func (kv KV) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || strings.TrimSpace(k) == "" {
		return fmt.Errorf("%q is not KEY=VALUE", s)
	}
	kv[strings.TrimSpace(k)] = v
	return nil
}

// Options are explain's inputs: the flags, or what a caller read from a
// cluster (PodManifest, Entry).
type Options struct {
	Profile, MeshConfig, ConfigPath, PodPath, Family, Format string
	Annotations, Labels                                      KV
	// PodManifest is a pod as --pod would read it (YAML or JSON), from
	// PodSource ("pod shop/web-0"); it replaces PodPath.
	PodManifest []byte
	PodSource   string
	// Entry is the chain entry (compact JSON) from EntrySource, used
	// when neither ConfigPath nor Profile is given.
	Entry       []byte
	EntrySource string
}

// NewOptions returns the flags' defaults.
func NewOptions() Options {
	return Options{Format: "both", Annotations: KV{}, Labels: KV{}}
}

// AddFlags binds the flags to o.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Profile, "profile", o.Profile, "one profile (linkerd, istio, kuma, consul, custom), with its defaults")
	fs.StringVar(&o.MeshConfig, "mesh-config", o.MeshConfig, "that profile's settings (a meshes.<name> object, JSON)")
	fs.StringVar(&o.ConfigPath, "config", o.ConfigPath, "the chain entry (or a conflist holding it); default from the cluster: the entry the agent on the pod's node runs, else the built-in profiles")
	fs.StringVar(&o.PodPath, "pod", o.PodPath, "a pod or workload manifest, YAML or JSON (kubectl get pod -o yaml; a Deployment etc.: its pod template)")
	fs.StringVar(&o.Family, "family", o.Family, "the pod's families, ipv4,ipv6 (default: the pod's status.podIPs, else both)")
	fs.StringVar(&o.Format, "format", o.Format, "rules as nft, iptables or both")
	fs.Var(o.Annotations, "annotation", "a pod annotation KEY=VALUE (repeatable; over the pod's)")
	fs.Var(o.Labels, "label", "a pod label KEY=VALUE (repeatable; over the pod's)")
}

// Validate reports a wrong combination of flags (a usage error).
func (o Options) Validate() error {
	switch {
	case o.Profile != "" && o.ConfigPath != "":
		return errors.New("--profile and --config exclude each other")
	case o.MeshConfig != "" && o.Profile == "":
		return errors.New("--mesh-config needs --profile")
	case !slices.Contains([]string{"nft", "iptables", "both"}, o.Format):
		return fmt.Errorf("--format %q: want nft, iptables or both", o.Format)
	}
	return nil
}
