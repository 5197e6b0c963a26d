package main

import (
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mesh-cni/mesh-cni/internal/ctl/check"
	"github.com/mesh-cni/mesh-cni/internal/version"
)

// versions is what version prints with -o json or yaml.
type versions struct {
	Client buildInfo     `json:"client"`
	Agents []agentOnNode `json:"agents,omitempty"` // nil with --client
}

type buildInfo struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
}

// agentOnNode is one node's agent as its status annotation says; Version
// is "" where the node carries none.
type agentOnNode struct {
	Node    string `json:"node"`
	Version string `json:"version,omitempty"`
	Ready   bool   `json:"ready"`
	Backend string `json:"backend,omitempty"`
}

func newVersion(kube *kubeFlags) *cobra.Command {
	var clientOnly bool
	timeout := 10 * time.Second
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the client's version and the agents' on every node",
		Long: `Prints this binary's version and commit, then the version of the mesh-cni
agent on every node, as its Node status annotation ` + check.StatusAnnotation + `
says: that needs only list on nodes (the agents' mesh_cni_build_info metric
says the same, but reading it needs a metrics token and a port-forward).
--client prints the first line only, without the cluster. Exit code 1 when
the nodes cannot be read (the client's line is printed first).`,
		Args: noArgs,
	}
	out := addOutput(cmd)
	cmd.Flags().BoolVar(&clientOnly, "client", false, "the client's version only; no cluster needed")
	cmd.Flags().DurationVar(&timeout, "timeout", timeout, "limit for each API call")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := out.validate(); err != nil {
			return err
		}
		w := cmd.OutOrStdout()
		v := versions{Client: buildInfo{Version: version.Version, Commit: version.Commit}}
		text, wide := out.text()
		if text {
			fmt.Fprintln(w, progName+" "+version.String())
		}
		var err error
		if !clientOnly {
			v.Agents, err = agentVersions(cmd, kube, timeout)
		}
		switch {
		case text && err == nil && !clientOnly:
			writeAgents(w, v.Agents, wide)
		case !text && err == nil:
			if perr := out.print(w, "Version", v); perr != nil {
				return perr
			}
		}
		return err
	}
	return cmd
}

func agentVersions(cmd *cobra.Command, kube *kubeFlags, timeout time.Duration) ([]agentOnNode, error) {
	client, err := newClient(kube, timeout)
	if err != nil {
		return nil, fmt.Errorf("agents' versions: %w (--client for the client only)", err)
	}
	nodes, err := client.CoreV1().Nodes().List(cmd.Context(), metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("agents' versions: list nodes: %w (--client for the client only)", err)
	}
	out := []agentOnNode{}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		a := agentOnNode{Node: n.Name}
		if st, err := check.ParseAgentStatus(n); err == nil && st != nil {
			a.Version, a.Ready, a.Backend = st.Version, st.Ready, st.Backend
		}
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out, nil
}

// writeAgents prints a line per agent version with its nodes, or with
// wide a row per node.
func writeAgents(w interface{ Write([]byte) (int, error) }, agents []agentOnNode, wide bool) {
	if wide {
		tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tAGENT\tREADY\tBACKEND")
		for _, a := range agents {
			fmt.Fprintf(tw, "%s\t%s\t%v\t%s\n", a.Node, or(a.Version, "<none>"), a.Ready, or(a.Backend, "<none>"))
		}
		tw.Flush()
		return
	}
	byVersion := map[string][]string{}
	for _, a := range agents {
		byVersion[a.Version] = append(byVersion[a.Version], a.Node)
	}
	if len(agents) == 0 {
		fmt.Fprintln(w, "agents: no nodes")
	}
	keys := make([]string, 0, len(byVersion))
	for k := range byVersion {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		nodes := byVersion[k]
		if k == "" {
			fmt.Fprintf(w, "no agent status on %d node(s): %s\n", len(nodes), strings.Join(nodes, ", "))
			continue
		}
		fmt.Fprintf(w, "agent %s on %d node(s): %s\n", k, len(nodes), strings.Join(nodes, ", "))
	}
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
