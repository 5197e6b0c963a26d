package explain

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

const usage = `usage: mesh-cnictl explain [flags]

Shows whether ADD would redirect a pod, and the rules it would write, as an
"nft -f" script and as "iptables-restore --noflush" input per family.

Settings (default: the linkerd, istio, kuma and consul profiles with their defaults):
  --profile NAME                   one profile (linkerd, istio, kuma, consul, custom), with its defaults
  --mesh-config JSON               that profile's settings (a meshes.<name> object)
  --config FILE                    the chain entry (or a conflist holding it)
The pod:
  --pod FILE                       a pod or workload manifest, YAML or JSON
                                   (kubectl get pod -o yaml; a Deployment etc.: its pod template)
  --annotation KEY=VALUE           a pod annotation (repeatable; over --pod's)
  --label KEY=VALUE                a pod label (repeatable; over --pod's)
Output:
  --family ipv4,ipv6               the pod's families (default: --pod's status.podIPs, else both)
  --format nft|iptables|both       (default both)
`

// KV is a repeatable KEY=VALUE flag (stdlib flag and pflag).
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

// AddFlags binds the flags to o; usage strings are those of the usage text.
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

// Run is the CLI. Exit codes: 0 done (whatever the decision), 1 the input
// is invalid (the error ADD would fail with), 2 usage.
func Run(args []string, stdout, stderr io.Writer) int {
	o := NewOptions()
	fs := flag.NewFlagSet("mesh-cnictl explain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	fs.StringVar(&o.Profile, "profile", "", "")
	fs.StringVar(&o.MeshConfig, "mesh-config", "", "")
	fs.StringVar(&o.ConfigPath, "config", "", "")
	fs.StringVar(&o.PodPath, "pod", "", "")
	fs.StringVar(&o.Family, "family", "", "")
	fs.StringVar(&o.Format, "format", "both", "")
	fs.Var(o.Annotations, "annotation", "")
	fs.Var(o.Labels, "label", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	usageErr := func(msg string) int {
		fmt.Fprintf(stderr, "mesh-cnictl explain: %s\n%s", msg, usage)
		return 2
	}
	if fs.NArg() > 0 {
		return usageErr(fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	if err := o.Validate(); err != nil {
		return usageErr(err.Error())
	}
	if _, err := Explain(o, stdout); err != nil {
		fmt.Fprintf(stderr, "mesh-cnictl explain: %v\n", err)
		return 1
	}
	return 0
}
