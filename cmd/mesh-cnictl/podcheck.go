package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/mesh-cni/mesh-cni/internal/backend/finding"
	"github.com/mesh-cni/mesh-cni/internal/ctl/check"
)

// exitRulesDiffer: explain --check found the pod's netns without some of
// the rules ADD writes, or with rules of ours ADD does not write.
const exitRulesDiffer = 3

// maxReport bounds the agent's answer read through the API server (a
// report holds at most finding.MaxFindings rules).
const maxReport = 4 << 20

// podRules asks the agent on the pod's node, through the API server's
// pods/proxy, which of the rules ADD writes the pod's netns holds. It
// needs list on pods in the agent's namespace (to find the agent pod of
// that node) and get on pods/proxy there; the agent itself only reads.
func podRules(ctx context.Context, client kubernetes.Interface, agentNS string, pod *corev1.Pod) (*finding.Report, string, error) {
	node := pod.Spec.NodeName
	agents, err := client.CoreV1().Pods(agentNS).List(ctx, metav1.ListOptions{
		LabelSelector: check.AgentSelector,
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return nil, "", fmt.Errorf("find the mesh-cni agent pod on node %s in namespace %s: %w", node, agentNS, err)
	}
	var agent *corev1.Pod
	port := 0
	for i := range agents.Items {
		p := &agents.Items[i]
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, c := range p.Spec.Containers {
			for _, cp := range c.Ports {
				if cp.Name == finding.PortName {
					agent, port = p, int(cp.ContainerPort)
				}
			}
		}
		if agent == nil {
			agent = p
		}
	}
	switch {
	case agent == nil:
		return nil, "", fmt.Errorf("no running mesh-cni agent pod (%s) on node %s in namespace %s (-n of check, --agent-namespace here)", check.AgentSelector, node, agentNS)
	case port == 0:
		return nil, "", fmt.Errorf("agent pod %s/%s has no port %s: the chart's podRules.enabled is false, or the agent is older than this CLI", agentNS, agent.Name, finding.PortName)
	}
	where := fmt.Sprintf("agent pod %s/%s", agentNS, agent.Name)
	rc, err := client.CoreV1().RESTClient().Get().
		Namespace(agentNS).Resource("pods").Name(agent.Name+":"+strconv.Itoa(port)).
		SubResource("proxy").Suffix(strings.TrimPrefix(finding.Path, "/")).
		Param("namespace", pod.Namespace).Param("name", pod.Name).Param("uid", string(pod.UID)).
		Stream(ctx)
	if err != nil {
		return nil, where, fmt.Errorf("ask %s (pods/proxy): %w", where, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxReport+1))
	if err != nil {
		return nil, where, fmt.Errorf("read the answer of %s: %w", where, err)
	}
	if len(b) > maxReport {
		return nil, where, fmt.Errorf("the answer of %s is over %d bytes", where, maxReport)
	}
	var rep finding.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, where, fmt.Errorf("the answer of %s: %w", where, err)
	}
	return &rep, where, nil
}

// writeFindings prints the report as a table, then the counts.
func writeFindings(w io.Writer, where string, rep *finding.Report) error {
	fmt.Fprintf(w, "\ncheck: through %s: netns %s (%d file(s) scanned), read with %s\n", where, rep.Netns, rep.Scanned, rep.Backend)
	if rep.Decision != "" && rep.Reason != "" {
		fmt.Fprintf(w, "  the agent decides: %s (%s)\n", rep.Decision, rep.Reason)
	}
	// kubectl's table layout; one Flush, so no widths to remember.
	tw := tabwriter.NewWriter(w, 6, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "STATE\tFAMILY\tTABLE\tCHAIN\tRULE")
	for _, f := range rep.Findings {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", f.State, f.Family, f.Table, f.Chain, f.Rule)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "check: %d present, %d missing, %d extra", finding.Count(rep.Findings, finding.Present),
		finding.Count(rep.Findings, finding.Missing), finding.Count(rep.Findings, finding.Extra))
	if rep.Truncated {
		fmt.Fprintf(w, " (only the first %d)", finding.MaxFindings)
	}
	fmt.Fprintln(w)
	return nil
}

// rulesDiffer: anything missing or extra.
func rulesDiffer(rep *finding.Report) bool {
	return finding.Count(rep.Findings, finding.Missing) > 0 || finding.Count(rep.Findings, finding.Extra) > 0
}
