package check

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/mesh-cni/mesh-cni/internal/node"
)

// NoOtherMeshPlugin fails for each node whose agent found another mesh's
// CNI plugin (istio-cni, linkerd-cni) chained beside mesh-cni: the agent
// stays ready there, as most pods still work, so only this check says it.
func NoOtherMeshPlugin(ctx context.Context, c *Cluster) Result {
	const name = "no other mesh CNI plugin chained beside mesh-cni"
	nodes, err := c.agentNodes(ctx)
	if err != nil {
		return fail(name, err.Error(), "run as a user who may list nodes")
	}
	var details, plugins []string
	for _, n := range nodes {
		st, err := agentStatus(n)
		if err != nil || st == nil || len(st.Others) == 0 {
			continue // the agent-ready check reports these
		}
		where := ""
		if st.Conf != "" {
			where = " in " + st.Conf
		}
		details = append(details, "node "+n.Name+": "+strings.Join(st.Others, ", ")+" chained beside mesh-cni"+where)
		for _, p := range st.Others {
			if !slices.Contains(plugins, p) {
				plugins = append(plugins, p)
			}
		}
	}
	if len(details) == 0 {
		return ok(name, fmt.Sprintf("%d/%d nodes", len(nodes), len(nodes)))
	}
	fixes := make([]string, len(plugins))
	for i, p := range plugins {
		fixes[i] = node.OtherMeshFix(p)
	}
	return fail(name, fmt.Sprintf("%d/%d nodes run %s as well", len(details), len(nodes), strings.Join(plugins, " and ")),
		node.OtherMeshEffect+"; "+strings.Join(fixes, "; "), details...)
}
