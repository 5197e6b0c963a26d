// Command naive-cni is the benchmark's baseline: a chained plugin that
// writes the same rules as mesh-cni the way older mesh CNI plugins do, by
// exec'ing iptables once per chain and once per rule inside the pod netns.
// It exists only to be measured; it is not shipped.
package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/mesh-cni/mesh-cni/internal/mesh"
	"github.com/mesh-cni/mesh-cni/internal/rules"
)

type conf struct {
	types.NetConf
	RuntimeConfig struct {
		Annotations map[string]string `json:"io.kubernetes.cri.pod-annotations"`
	} `json:"runtimeConfig"`
}

func parse(b []byte) (*conf, error) {
	c := &conf{}
	if err := json.Unmarshal(b, c); err != nil {
		return nil, err
	}
	if err := version.ParsePrevResult(&c.NetConf); err != nil {
		return nil, err
	}
	return c, nil
}

func cmdAdd(args *skel.CmdArgs) error {
	c, err := parse(args.StdinData)
	if err != nil {
		return err
	}
	res, err := current.NewResultFromResult(c.PrevResult)
	if err != nil {
		return err
	}
	var fams []rules.Family
	for _, ip := range res.IPs {
		f := rules.IPv6
		if ip.Address.IP.To4() != nil {
			f = rules.IPv4
		}
		fams = append(fams, f)
	}
	// Like the exec-per-rule plugins, decide from the annotations alone:
	// trust them (the profiles' default asks for the pod spec).
	trust := true
	d, err := mesh.Decide(map[string]mesh.Config{mesh.Istio: {TrustAnnotations: &trust}, mesh.Linkerd: {TrustAnnotations: &trust}},
		mesh.Pod{Annotations: c.RuntimeConfig.Annotations}, fams)
	if err != nil {
		return err
	}
	if d.NeedSpec {
		return fmt.Errorf("naive-cni: the annotations cannot decide (%s)", d.Reason)
	}
	if d.Meshed {
		rs := rules.Generate(*d.Spec)
		for _, f := range rs.Families {
			if err := execRules(args.Netns, f, rules.IptablesRestore(rs, f)); err != nil {
				return err
			}
		}
	}
	return types.PrintResult(c.PrevResult, c.CNIVersion)
}

// execRules runs one iptables command per line of iptables-restore input.
func execRules(netns string, f rules.Family, restore string) error {
	bin := "iptables"
	if f == rules.IPv6 {
		bin = "ip6tables"
	}
	table := ""
	for _, line := range strings.Split(restore, "\n") {
		var argv []string
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
			continue
		case strings.HasPrefix(line, ":"):
			argv = []string{"-t", table, "-N", strings.Fields(line[1:])[0]}
		case strings.HasPrefix(line, "-A "):
			argv = append([]string{"-t", table}, split(line)...)
		default:
			continue
		}
		cmd := exec.Command("nsenter", append([]string{"--net=" + netns, bin}, argv...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s %v: %w: %s", bin, argv, err, out)
		}
	}
	return nil
}

// split splits a rule line into words, honouring double quotes.
func split(s string) []string {
	var out []string
	var cur strings.Builder
	quoted, have := false, false
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == '\\' && quoted && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
		case ch == '"':
			quoted, have = !quoted, true
		case ch == ' ' && !quoted:
			if have {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteByte(ch)
			have = true
		}
	}
	if have {
		out = append(out, cur.String())
	}
	return out
}

// cmdDel flushes and deletes every MESH_ chain, one exec each, as the
// exec-per-rule plugins do.
func cmdDel(args *skel.CmdArgs) error {
	if args.Netns == "" {
		return nil
	}
	for _, bin := range []string{"iptables", "ip6tables"} {
		for _, table := range []string{"nat", "mangle"} {
			out, err := exec.Command("nsenter", "--net="+args.Netns, bin+"-save", "-t", table).Output()
			if err != nil {
				return nil //nolint:nilerr // netns gone: nothing to save
			}
			for _, line := range strings.Split(string(out), "\n") {
				if strings.HasPrefix(line, "-A ") && !strings.HasPrefix(line, "-A MESH_") {
					if strings.Contains(line, "-j MESH_") {
						argv := append([]string{"--net=" + args.Netns, bin, "-t", table, "-D"}, split(line)[1:]...)
						_ = exec.Command("nsenter", argv...).Run()
					}
				}
			}
			for _, line := range strings.Split(string(out), "\n") {
				if strings.HasPrefix(line, ":MESH_") {
					chain := strings.Fields(line[1:])[0]
					_ = exec.Command("nsenter", "--net="+args.Netns, bin, "-t", table, "-F", chain).Run()
					_ = exec.Command("nsenter", "--net="+args.Netns, bin, "-t", table, "-X", chain).Run()
				}
			}
		}
	}
	return nil
}

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{Add: cmdAdd, Del: cmdDel, Check: func(*skel.CmdArgs) error { return nil }},
		version.All, "naive-cni (benchmark baseline)")
}
