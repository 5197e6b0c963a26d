// Package explain is "mesh-cnictl explain": it shows what ADD would decide for
// a pod and the rules it would write, without touching any netns.
package explain

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/pflag"

	"github.com/mesh-cni/mesh-cni/internal/config"
	"github.com/mesh-cni/mesh-cni/internal/mesh"
	"github.com/mesh-cni/mesh-cni/internal/rules"
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

// Result is what explain decided, for -o json and yaml.
type Result struct {
	Pod      string   `json:"pod,omitempty"`
	Entry    string   `json:"entry,omitempty"` // where the chain entry came from
	Decision string   `json:"decision"`        // redirect or skip
	Mesh     string   `json:"mesh,omitempty"`
	Reason   string   `json:"reason,omitempty"`
	Notes    []string `json:"notes,omitempty"`
	Families []string `json:"families,omitempty"`
	// The rules as "nft -f" input, and "iptables-restore --noflush" input
	// per program (iptables, ip6tables); Commands run besides them.
	Nft      string            `json:"nft,omitempty"`
	Iptables map[string]string `json:"iptables,omitempty"`
	Commands []string          `json:"commands,omitempty"`
}

// settings is what the chain entry contributes.
type settings struct {
	meshes      map[string]mesh.Config
	excludeNS   []string
	agentNS     string
	agentPrefix string
	ipv6        bool
}

func loadSettings(o Options) (settings, error) {
	s := settings{ipv6: true}
	switch {
	case o.ConfigPath != "" || (o.Profile == "" && len(o.Entry) > 0):
		var conf *config.NetConf
		var err error
		if o.ConfigPath != "" {
			conf, err = readChainEntry(o.ConfigPath)
		} else if conf, err = config.Parse(o.Entry); err != nil {
			err = fmt.Errorf("%s: %w", o.EntrySource, err)
		}
		if err != nil {
			return s, err
		}
		s.meshes, s.excludeNS = conf.Meshes, conf.ExcludeNamespaces
		s.agentNS, s.agentPrefix = conf.AgentNamespace, conf.AgentPodPrefix
		s.ipv6 = conf.IPv6 == nil || *conf.IPv6
	case o.Profile != "":
		if _, err := mesh.Defaults(o.Profile); err != nil {
			return s, err
		}
		var c mesh.Config
		if o.MeshConfig != "" {
			dec := json.NewDecoder(strings.NewReader(o.MeshConfig))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&c); err != nil {
				return s, fmt.Errorf("--mesh-config: %w", err)
			}
		}
		c.Enabled = ptr(true)
		s.meshes = map[string]mesh.Config{o.Profile: c}
	default:
		s.meshes = mesh.Sidecars()
	}
	for _, name := range sortedKeys(s.meshes) {
		if err := mesh.Validate(name, s.meshes[name]); err != nil {
			return s, err
		}
	}
	return s, nil
}

// readChainEntry reads the chain entry through internal/config, the plugin's own
// parser. A conflist is accepted too: its mesh-cni entry is used.
func readChainEntry(path string) (*config.NetConf, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var list struct {
		Plugins []json.RawMessage `json:"plugins"`
	}
	if json.Unmarshal(b, &list) == nil && list.Plugins != nil {
		b = nil
		for _, p := range list.Plugins {
			var t struct {
				Type string `json:"type"`
			}
			if json.Unmarshal(p, &t) == nil && t.Type == "mesh-cni" {
				b = p
			}
		}
		if b == nil {
			return nil, fmt.Errorf("%s: the conflist has no mesh-cni entry", path)
		}
	}
	conf, err := config.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return conf, nil
}

// Explain writes what ADD would decide for the pod and the rules it would
// write to w, and returns the same as a Result.
func Explain(o Options, w io.Writer) (*Result, error) {
	res, _, err := explain(o, w)
	return res, err
}

// Rules is Explain without the text: the decision, and the rule set ADD
// would write (empty when it skips the pod). The agent compares a pod's
// netns with it.
func Rules(o Options) (*Result, rules.RuleSet, error) {
	res, rs, err := explain(o, io.Discard)
	if err != nil || rs == nil {
		return res, rules.RuleSet{}, err
	}
	return res, *rs, nil
}

func explain(o Options, w io.Writer) (*Result, *rules.RuleSet, error) {
	set, err := loadSettings(o)
	if err != nil {
		return nil, nil, err
	}
	res := &Result{Entry: o.EntrySource}
	switch {
	case o.ConfigPath != "":
		res.Entry = o.ConfigPath
	case o.Profile != "":
		res.Entry = "profile " + o.Profile
	case len(o.Entry) == 0:
		res.Entry = "built-in profiles"
	}
	note := func(format string, a ...any) {
		n := fmt.Sprintf(format, a...)
		res.Notes = append(res.Notes, n)
		fmt.Fprintln(w, "note: "+n)
	}
	pod := mesh.Pod{Annotations: map[string]string{}}
	var fams []rules.Family
	switch {
	case o.PodManifest != nil:
		if pod, fams, err = parsePod(o.PodManifest, o.PodSource); err != nil {
			return nil, nil, err
		}
	case o.PodPath != "":
		if pod, fams, err = readPod(o.PodPath); err != nil {
			return nil, nil, err
		}
	}
	for k, v := range o.Annotations {
		pod.Annotations[k] = v
	}
	if len(o.Labels) > 0 && pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	for k, v := range o.Labels {
		pod.Labels[k] = v
	}
	if o.Family != "" {
		if fams, err = parseFamilies(o.Family); err != nil {
			return nil, nil, err
		}
	}
	if len(fams) == 0 {
		fams = []rules.Family{rules.IPv4, rules.IPv6}
	}
	if !set.ipv6 {
		fams = slices.DeleteFunc(slices.Clone(fams), func(f rules.Family) bool { return f == rules.IPv6 })
		note("the chain entry has \"ipv6\": false, IPv6 is not programmed")
		if len(fams) == 0 {
			return nil, nil, errors.New("the pod has only IPv6 and the chain entry has \"ipv6\": false")
		}
	}
	if pod.Name != "" {
		res.Pod = pod.Namespace + "/" + pod.Name
		fmt.Fprintf(w, "pod: %s/%s\n", pod.Namespace, pod.Name)
	}
	if set.excluded(pod) {
		res.Decision, res.Reason = "skip", mesh.ReasonExcluded
		fmt.Fprintf(w, "decision: skip (%s): namespace or agent pod excluded by the chain entry; ADD changes nothing\n", mesh.ReasonExcluded)
		return res, nil, nil
	}

	// As ADD does: the annotations first (what the runtime passes), the
	// pod spec only when they cannot decide.
	first := pod
	first.SpecKnown, first.Containers, first.InitContainers, first.Labels = false, nil, nil, nil
	d, err := mesh.Decide(set.meshes, first, fams)
	if err != nil {
		return nil, nil, err
	}
	if d.NeedSpec {
		fmt.Fprintf(w, "annotations alone: cannot decide (%s%s); ADD looks the pod up\n", d.Reason, meshSuffix(d.Mesh))
		if !pod.SpecKnown {
			// Show what ADD applies if the lookup confirms the sidecar,
			// with the profile's identity (the spec may change it).
			sidecar := set.meshes[d.Mesh].WithDefaults(d.Mesh).Sidecar
			res.Notes = append(res.Notes, fmt.Sprintf("needs the pod spec; assumed it runs %s in CNI mode", sidecar))
			fmt.Fprintf(w, "decision: needs the pod spec (pass --pod); assuming it runs %s in CNI mode:\n", sidecar)
			pod.SpecKnown, pod.Containers = true, []mesh.Container{{Name: sidecar}}
		}
		if d, err = mesh.Decide(set.meshes, pod, fams); err != nil {
			return nil, nil, err
		}
	}
	res.Mesh, res.Reason = d.Mesh, d.Reason
	if !d.Meshed {
		res.Decision = "skip"
		fmt.Fprintf(w, "decision: skip (%s%s); ADD changes nothing\n", d.Reason, meshSuffix(d.Mesh))
		return res, nil, nil
	}
	res.Decision = "redirect"
	fmt.Fprintf(w, "decision: redirect (mesh %s)\n", d.Mesh)
	for _, n := range d.Notes {
		note("%s", n)
	}
	if d.Mesh == mesh.Kuma && o.Family == "" && set.ipv6 {
		// ADD decides as kuma-cni does, from the netns: any IPv6 address,
		// link-local included, means IPv6, which a pod with eth0 nearly
		// always has.
		d.Spec.Families = mesh.KumaFamilies([]netip.Addr{netip.MustParseAddr("fe80::1")})
		note("kuma: ADD redirects IPv6 whenever the pod has any IPv6 address, link-local included (shown: with one; --family ipv4 for a pod without)")
	}
	for _, f := range d.Spec.Families {
		res.Families = append(res.Families, f.String())
	}
	writeSpec(w, *d.Spec)
	rs := rules.Generate(*d.Spec)
	if o.Format != "iptables" {
		res.Nft = rules.Nft(rs)
		fmt.Fprintf(w, "\n# nft -f -\n%s", res.Nft)
	}
	if o.Format != "nft" {
		res.Iptables = map[string]string{}
		for _, f := range rs.Families {
			prog := "iptables"
			if f == rules.IPv6 {
				prog = "ip6tables"
			}
			res.Iptables[prog] = rules.IptablesRestore(rs, f)
			fmt.Fprintf(w, "\n# %s-restore --noflush\n%s", prog, res.Iptables[prog])
		}
	}
	for _, pr := range rs.PolicyRoutes {
		cmds := []string{fmt.Sprintf("ip rule add fwmark %d lookup %d", pr.Mark, pr.Table), fmt.Sprintf("ip route add local default dev lo table %d", pr.Table)}
		res.Commands = append(res.Commands, cmds...)
		fmt.Fprintf(w, "\n# policy routing, per family\n%s\n", strings.Join(cmds, "\n"))
	}
	for _, a := range rs.LoopbackAddrs {
		res.Commands = append(res.Commands, fmt.Sprintf("ip addr add %s dev lo", a))
		fmt.Fprintf(w, "\n# before the rules\nip addr add %s dev lo\n", a)
	}
	return res, &rs, nil
}

func (s settings) excluded(pod mesh.Pod) bool {
	if pod.Namespace == "" {
		return false
	}
	if slices.Contains(s.excludeNS, pod.Namespace) {
		return true
	}
	return s.agentNS != "" && pod.Namespace == s.agentNS && s.agentPrefix != "" && strings.HasPrefix(pod.Name, s.agentPrefix)
}

func meshSuffix(m string) string {
	if m == "" {
		return ""
	}
	return ", mesh " + m
}

func parseFamilies(s string) ([]rules.Family, error) {
	var out []rules.Family
	for _, p := range strings.Split(s, ",") {
		switch strings.ToLower(strings.TrimSpace(p)) {
		case "ipv4", "4", "v4":
			out = append(out, rules.IPv4)
		case "ipv6", "6", "v6":
			out = append(out, rules.IPv6)
		default:
			return nil, fmt.Errorf("--family %q: want ipv4, ipv6 or both", s)
		}
	}
	return out, nil
}

// writeSpec prints the resolved settings, one line each.
func writeSpec(w io.Writer, s rules.Spec) {
	var b bytes.Buffer
	line := func(k, format string, a ...any) {
		fmt.Fprintf(&b, "  %-18s "+format+"\n", append([]any{k + ":"}, a...)...)
	}
	fams := make([]string, len(s.Families))
	for i, f := range s.Families {
		fams[i] = f.String()
	}
	line("families", "%s", strings.Join(fams, ", "))
	line("mode", "%s", s.Mode)
	gid := "none"
	if s.ProxyGID != nil {
		gid = fmt.Sprint(*s.ProxyGID)
	}
	line("proxy uid/gid", "%d/%s (exempt)", s.ProxyUID, gid)
	line("inbound", "to port %d, ports %s, except %s", s.InboundPort, portsOr(s.InboundPorts, "all"), portsOr(withTunnel(s), "none"))
	except := portsOr(s.IgnoreOutbound, "none")
	if s.IgnoreOutboundFirst && len(s.IgnoreOutbound) > 0 {
		except += " (tcp and udp, before DNS capture)"
	}
	line("outbound", "to port %d, except ports %s", s.OutboundPort, except)
	if s.IncludeSubnets != nil {
		line("outbound only to", "%s, or ports %s", prefixesOr(s.IncludeSubnets, "no subnet"), portsOr(s.IncludeOutbound, "none"))
	}
	line("skip subnets", "%s (inbound sources); %s (outbound destinations)", prefixesOr(s.SkipSubnets, "none"), prefixesOr(s.SkipOutboundSubnets, "none"))
	if len(s.ExcludeIfaces) > 0 {
		line("excluded ifaces", "%s", strings.Join(s.ExcludeIfaces, ", "))
	}
	if len(s.SkipInboundSources) > 0 {
		line("skip sources", "%s (inbound)", prefixesOr(s.SkipInboundSources, "none"))
	}
	if len(s.ExemptUIDs) > 0 {
		when := "DNS capture still applies"
		if s.ExemptDNS {
			when = "before DNS capture and the proxy's path to its own pod"
		}
		line("exempt uids", "%s (outbound not redirected; %s)", exemptUIDs(s.ExemptUIDs), when)
	}
	if s.CaptureDNS && s.DNSPort != 0 {
		proto, dst, who := "tcp/udp", "any destination", "every process but the proxy"
		if s.DNSUDPOnly {
			proto = "udp"
		}
		if s.DNSDest != nil {
			dst = prefixesOr(fams6(s.DNSDest, s.Families), "no destination")
		}
		if s.DNSFirst {
			who = "every process, the proxy too"
		}
		if s.ExemptDNS && (len(s.SkipOutboundSubnets) > 0 || len(s.SkipSubnets) > 0) {
			dst += " except the skipped subnets"
		}
		line("dns", "%s 53 to %s, from %s, to port %d", proto, dst, who, s.DNSPort)
	}
	if s.LoopbackToInbound {
		direct := slices.Clone(s.IgnoreOutbound) // returned first or in MESH_PROXY_SELF: direct either way
		if s.TunnelPort != 0 {
			direct = append(direct, rules.PortRange{First: s.TunnelPort, Last: s.TunnelPort})
		}
		if s.CaptureDNS && !s.DNSUDPOnly {
			direct = append(direct, rules.PortRange{First: rules.DNSPort, Last: rules.DNSPort})
		}
		line("proxy to self", "to port %d, except ports %s (the inbound exclusions do not apply)", s.InboundPort, portsOr(direct, "none"))
	}
	if s.DropInvalid {
		line("drop invalid", "conntrack INVALID packets dropped (mangle PREROUTING)")
	}
	if lo := fams6(s.LoopbackAddrs, s.Families); len(lo) > 0 {
		line("lo addresses", "%s added before the rules, left at DEL", prefixesOr(lo, "none"))
	}
	_, _ = w.Write(b.Bytes())
}

// fams6 keeps the prefixes of the families programmed.
func fams6(ps []netip.Prefix, fams []rules.Family) []netip.Prefix {
	out := []netip.Prefix{}
	for _, f := range fams {
		out = append(out, rules.ForFamily(ps, f)...)
	}
	return out
}

// exemptUIDs prints each exemption: "1000", "2000-2999 tcp ports 22,443".
func exemptUIDs(es []rules.UIDExemption) string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = fmt.Sprint(e.First)
		if e.Last > e.First {
			out[i] += fmt.Sprintf("-%d", e.Last)
		}
		if e.Proto != rules.AnyProto {
			out[i] += " " + string(e.Proto)
		}
		if len(e.Ports) > 0 {
			out[i] += " ports " + portsOr(e.Ports, "none")
		}
	}
	return strings.Join(out, ", ")
}

func withTunnel(s rules.Spec) []rules.PortRange {
	out := slices.Clone(s.IgnoreInbound)
	if s.TunnelPort != 0 && s.Mode != rules.TProxy { // Istio exempts it in nat only
		out = append(out, rules.PortRange{First: s.TunnelPort, Last: s.TunnelPort})
	}
	return out
}

func portsOr(ps []rules.PortRange, none string) string {
	if ps == nil {
		return none
	}
	if len(ps) == 0 {
		return "none"
	}
	ps = slices.Clone(ps)
	slices.SortFunc(ps, func(a, b rules.PortRange) int { return int(a.First) - int(b.First) })
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = fmt.Sprint(p.First)
		if p.Last != p.First {
			s[i] += fmt.Sprintf("-%d", p.Last)
		}
	}
	return strings.Join(s, ",")
}

func prefixesOr[T fmt.Stringer](ps []T, none string) string {
	if len(ps) == 0 {
		return none
	}
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func ptr[T any](v T) *T { return &v }
