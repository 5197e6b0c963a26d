// Package explain is "mesh-cnictl explain": it shows what ADD would decide for
// a pod and the rules it would write, without touching any netns.
package explain

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"

	"github.com/mesh-cni/mesh-cni/internal/mesh"
	"github.com/mesh-cni/mesh-cni/internal/rules"
)

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
	res := &Result{Entry: entrySource(o)}
	pod, fams, err := podOf(o)
	if err != nil {
		return nil, nil, err
	}
	if !set.ipv6 {
		fams = slices.DeleteFunc(slices.Clone(fams), func(f rules.Family) bool { return f == rules.IPv6 })
		res.note(w, "the chain entry has \"ipv6\": false, IPv6 is not programmed")
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
	d, err := decide(set, pod, fams, w, res)
	if err != nil {
		return nil, nil, err
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
		res.note(w, "%s", n)
	}
	if d.Mesh == mesh.Kuma && o.Family == "" && set.ipv6 {
		// ADD decides as kuma-cni does, from the netns: any IPv6 address,
		// link-local included, means IPv6, which a pod with eth0 nearly
		// always has.
		d.Spec.Families = mesh.KumaFamilies([]netip.Addr{netip.MustParseAddr("fe80::1")})
		res.note(w, "kuma: ADD redirects IPv6 whenever the pod has any IPv6 address, link-local included (shown: with one; --family ipv4 for a pod without)")
	}
	for _, f := range d.Spec.Families {
		res.Families = append(res.Families, f.String())
	}
	writeSpec(w, *d.Spec)
	rs := rules.Generate(*d.Spec)
	writeRules(w, o.Format, rs, res)
	return res, &rs, nil
}

// note records a note in the result and prints it.
func (res *Result) note(w io.Writer, format string, a ...any) {
	n := fmt.Sprintf(format, a...)
	res.Notes = append(res.Notes, n)
	fmt.Fprintln(w, "note: "+n)
}

// entrySource names where the chain entry came from.
func entrySource(o Options) string {
	switch {
	case o.ConfigPath != "":
		return o.ConfigPath
	case o.Profile != "":
		return "profile " + o.Profile
	case len(o.Entry) == 0:
		return "built-in profiles"
	}
	return o.EntrySource
}

// podOf is the pod (a manifest, a file, or nothing), with --annotation and
// --label over its own, and its families (--family over its podIPs; both
// when neither says).
func podOf(o Options) (mesh.Pod, []rules.Family, error) {
	pod := mesh.Pod{Annotations: map[string]string{}}
	var fams []rules.Family
	var err error
	switch {
	case o.PodManifest != nil:
		if pod, fams, err = parsePod(o.PodManifest, o.PodSource); err != nil {
			return pod, nil, err
		}
	case o.PodPath != "":
		if pod, fams, err = readPod(o.PodPath); err != nil {
			return pod, nil, err
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
			return pod, nil, err
		}
	}
	if len(fams) == 0 {
		fams = []rules.Family{rules.IPv4, rules.IPv6}
	}
	return pod, fams, nil
}

// decide is ADD's decision: the annotations first (what the runtime
// passes), the pod spec only when they cannot decide. Without the spec it
// assumes the sidecar runs, to show what ADD applies if the lookup
// confirms it.
func decide(set settings, pod mesh.Pod, fams []rules.Family, w io.Writer, res *Result) (mesh.Decision, error) {
	first := pod
	first.SpecKnown, first.Containers, first.InitContainers, first.Labels = false, nil, nil, nil
	d, err := mesh.Decide(set.meshes, first, fams)
	if err != nil || !d.NeedSpec {
		return d, err
	}
	fmt.Fprintf(w, "annotations alone: cannot decide (%s%s); ADD looks the pod up\n", d.Reason, meshSuffix(d.Mesh))
	if !pod.SpecKnown {
		// With the profile's identity (the spec may change it).
		sidecar := set.meshes[d.Mesh].WithDefaults(d.Mesh).Sidecar
		res.Notes = append(res.Notes, fmt.Sprintf("needs the pod spec; assumed it runs %s in CNI mode", sidecar))
		fmt.Fprintf(w, "decision: needs the pod spec (pass --pod); assuming it runs %s in CNI mode:\n", sidecar)
		pod.SpecKnown, pod.Containers = true, []mesh.Container{{Name: sidecar}}
	}
	return mesh.Decide(set.meshes, pod, fams)
}

// writeRules prints the rule set in the formats asked for, and the
// commands ADD runs besides it, and records them in the result.
func writeRules(w io.Writer, format string, rs rules.RuleSet, res *Result) {
	if format != "iptables" {
		res.Nft = rules.Nft(rs)
		fmt.Fprintf(w, "\n# nft -f -\n%s", res.Nft)
	}
	if format != "nft" {
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
