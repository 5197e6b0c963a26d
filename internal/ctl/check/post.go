package check

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mesh-cni/mesh-cni/internal/node"
)

// The chart's and the kustomize base's labels on the agent DaemonSet. The
// name label stays "mesh-cni" whatever the release is called.
const (
	nameLabel    = "app.kubernetes.io/name"
	versionLabel = "app.kubernetes.io/version"
	appName      = "mesh-cni"
)

// AgentSelector selects the agent's pods (and its DaemonSet).
const AgentSelector = nameLabel + "=" + appName

// agentNodes are the nodes the agent must run on: Linux and schedulable.
func (c *Cluster) agentNodes(ctx context.Context) ([]*corev1.Node, error) {
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	var out []*corev1.Node
	for i := range nodes {
		if os, _ := nodeOSArch(&nodes[i]); os == "linux" && !nodes[i].Spec.Unschedulable {
			out = append(out, &nodes[i])
		}
	}
	return out, nil
}

// daemonSet finds the agent DaemonSet in the namespace by its name label,
// else by the default name.
func (c *Cluster) daemonSet(ctx context.Context) (*appsv1.DaemonSet, error) {
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	dss := c.Client.AppsV1().DaemonSets(c.Opts.Namespace)
	l, err := dss.List(ctx, metav1.ListOptions{LabelSelector: nameLabel + "=" + appName})
	if err != nil {
		return nil, fmt.Errorf("list DaemonSets in %s: %w", c.Opts.Namespace, err)
	}
	if len(l.Items) > 1 {
		return nil, fmt.Errorf("%d DaemonSets labelled %s=%s in %s; expected one", len(l.Items), nameLabel, appName, c.Opts.Namespace)
	}
	if len(l.Items) == 1 {
		return &l.Items[0], nil
	}
	return dss.Get(ctx, appName, metav1.GetOptions{})
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// DaemonSetReady checks the agent DaemonSet is rolled out and has a ready
// pod on every schedulable Linux node.
func DaemonSetReady(ctx context.Context, c *Cluster) Result {
	const name = "agent DaemonSet is ready on every schedulable node"
	ns := c.Opts.Namespace
	ds, err := c.daemonSet(ctx)
	if apierrors.IsNotFound(err) {
		return fail(name, "no mesh-cni DaemonSet in namespace "+ns,
			"install mesh-cni (docs/install.md), or pass the namespace it is installed in with -n; nodes listed here "+
				"still carry mesh-cni from an uninstall whose agents could no longer read their DaemonSet: install again, "+
				"then uninstall as docs/upgrade.md says (DaemonSet first)",
			c.leftBehind(ctx)...)
	}
	if err != nil {
		return fail(name, err.Error(), "run as a user who may list daemonsets in "+ns)
	}
	nodes, err := c.agentNodes(ctx)
	if err != nil {
		return fail(name, err.Error(), "run as a user who may list nodes")
	}
	lctx, cancel := c.timeout(ctx)
	defer cancel()
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return fail(name, "DaemonSet "+ds.Name+" has an invalid selector: "+err.Error(), "reinstall the chart")
	}
	pods, err := c.Client.CoreV1().Pods(ns).List(lctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return fail(name, "list agent pods: "+err.Error(), "run as a user who may list pods in "+ns)
	}
	readyOn := map[string]bool{}
	for i := range pods.Items {
		if podReady(&pods.Items[i]) {
			readyOn[pods.Items[i].Spec.NodeName] = true
		}
	}
	st := ds.Status
	var details []string
	if st.NumberReady < st.DesiredNumberScheduled || st.UpdatedNumberScheduled < st.DesiredNumberScheduled {
		details = append(details, fmt.Sprintf("DaemonSet %s/%s: %d desired, %d updated, %d ready",
			ns, ds.Name, st.DesiredNumberScheduled, st.UpdatedNumberScheduled, st.NumberReady))
	}
	for _, n := range nodes {
		if !readyOn[n.Name] {
			details = append(details, "node "+n.Name+": no ready agent pod")
		}
	}
	if len(details) > 0 {
		return fail(name, fmt.Sprintf("%d/%d schedulable nodes have a ready agent", len(nodes)-countMissing(nodes, readyOn), len(nodes)),
			"kubectl -n "+ns+" describe daemonset "+ds.Name+"; kubectl -n "+ns+" logs daemonset/"+ds.Name+
				" (a node the DaemonSet does not cover needs its tolerations, nodeSelector or affinity values widened)",
			details...)
	}
	return ok(name, fmt.Sprintf("%d/%d nodes", len(nodes), len(nodes)))
}

// leftBehind names the nodes whose agent status says mesh-cni is
// installed there.
func (c *Cluster) leftBehind(ctx context.Context) []string {
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return nil
	}
	var out []string
	for i := range nodes {
		if st, err := agentStatus(&nodes[i]); err == nil && st != nil && st.Conf != "" {
			out = append(out, "node "+nodes[i].Name+": "+StatusAnnotation+" says mesh-cni is chained into "+st.Conf)
		}
	}
	return out
}

func countMissing(nodes []*corev1.Node, readyOn map[string]bool) int {
	n := 0
	for _, nd := range nodes {
		if !readyOn[nd.Name] {
			n++
		}
	}
	return n
}

// AgentsReady checks every agent reports binary, chain entry, kubeconfig
// and backend in place through its node's status annotation.
func AgentsReady(ctx context.Context, c *Cluster) Result {
	const name = "agent reports ready on every schedulable node"
	nodes, err := c.agentNodes(ctx)
	if err != nil {
		return fail(name, err.Error(), "run as a user who may list nodes")
	}
	var details []string
	refused := false
	for _, n := range nodes {
		st, err := agentStatus(n)
		if st != nil && !st.Ready && strings.Contains(st.Reason, RefusedReason) {
			refused = true
		}
		switch {
		case err != nil:
			details = append(details, "node "+n.Name+": "+err.Error())
		case st == nil:
			details = append(details, "node "+n.Name+": no "+StatusAnnotation+" annotation (agent not running or not yet started)")
		case st.problem() != "":
			details = append(details, "node "+n.Name+": "+st.problem())
		}
	}
	if len(details) > 0 && refused {
		return fail(name, fmt.Sprintf("%d/%d nodes ready", len(nodes)-len(details), len(nodes)),
			"the agent refused to chain: the reason names the bad setting, the missing binaries or the wrong bin dir, and what to change; "+
				"the chain keeps its last good entry meanwhile (docs/troubleshooting.md, \"The agent refuses to chain\"); "+
				"kubectl get events -A --field-selector involvedObject.kind=Node,reason="+RefusedEventReason,
			details...)
	}
	if len(details) > 0 {
		return fail(name, fmt.Sprintf("%d/%d nodes ready", len(nodes)-len(details), len(nodes)),
			"read the agent's log on that node: kubectl -n "+c.Opts.Namespace+" logs <agent pod on the node>; docs/troubleshooting.md lists the usual causes",
			details...)
	}
	return ok(name, fmt.Sprintf("%d/%d nodes", len(nodes), len(nodes)))
}

// VersionsMatch checks the agents (and with them the plugin binary they
// install) and the DaemonSet run the version of this CLI.
func VersionsMatch(ctx context.Context, c *Cluster) Result {
	name := "agent and plugin versions match " + c.Opts.Version
	nodes, err := c.agentNodes(ctx)
	if err != nil {
		return fail(name, err.Error(), "run as a user who may list nodes")
	}
	var details []string
	if ds, err := c.daemonSet(ctx); err == nil {
		if v, ok := ds.Labels[versionLabel]; ok && v != c.Opts.Version {
			details = append(details, fmt.Sprintf("DaemonSet %s: %s=%s", ds.Name, versionLabel, v))
		}
	}
	for _, n := range nodes {
		if st, err := agentStatus(n); err == nil && st != nil && st.Version != c.Opts.Version {
			details = append(details, fmt.Sprintf("node %s: agent %s", n.Name, st.Version))
		}
	}
	if len(details) > 0 {
		return fail(name, fmt.Sprintf("%d mismatch(es)", len(details)),
			"upgrade the chart to this version (docs/upgrade.md), or use the mesh-cnictl of the installed version; a rollout in progress also shows here",
			details...)
	}
	return ok(name, "")
}

// Validator init containers and the exit codes that say the redirect was
// missing when the pod started.
var validatorExit = map[int32]string{
	node.ValidatorExitCode:      "mesh-cni-validator",
	node.LinkerdValidatorExit:   "linkerd network-validator",
	node.IstioValidatorExitCode: "istio-validation",
}

// validatorFailure returns why a validator init container shows a missing
// redirect, or "". A validator that has since exited 0 found the redirect.
func validatorFailure(p *corev1.Pod) string {
	for _, s := range p.Status.InitContainerStatuses {
		if !strings.Contains(s.Name, "validat") {
			continue
		}
		if t := s.State.Terminated; t != nil && t.ExitCode == 0 {
			continue
		}
		for _, t := range []*corev1.ContainerStateTerminated{s.State.Terminated, s.LastTerminationState.Terminated} {
			if t == nil {
				continue
			}
			if who, ok := validatorExit[t.ExitCode]; ok {
				return fmt.Sprintf("init container %s exited %d (%s: redirect missing)", s.Name, t.ExitCode, who)
			}
		}
	}
	return ""
}

// startedAt is when the pod reached its node: the kubelet's start time, or
// its creation when the kubelet has not reported yet.
func startedAt(p *corev1.Pod) time.Time {
	if p.Status.StartTime != nil {
		return p.Status.StartTime.Time
	}
	return p.CreationTimestamp.Time
}

// NoRepairCandidates lists meshed pods that may run without redirection:
// they started on a node before its agent was ready, or their validator
// init container reported the redirect missing.
func NoRepairCandidates(ctx context.Context, c *Cluster) Result {
	const name = "no meshed pod started before its node was ready"
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return fail(name, err.Error(), "run as a user who may list nodes")
	}
	readySince := map[string]time.Time{}
	for i := range nodes {
		if st, err := agentStatus(&nodes[i]); err == nil && st != nil && st.Ready && !st.Time.IsZero() {
			readySince[nodes[i].Name] = st.Time
		}
	}
	meshes := c.meshes(ctx)
	lctx, cancel := c.timeout(ctx)
	defer cancel()
	pods, err := c.Client.CoreV1().Pods("").List(lctx, metav1.ListOptions{})
	if err != nil {
		return fail(name, "list pods: "+err.Error(), "run as a user who may list pods in all namespaces")
	}
	// A validator's exit code proves the redirect was missing. A start
	// before the agent's ready time means the pod reached its node before
	// the plugin was chained there: the agent keeps that time across its
	// own restarts (the chain entry stays), so only a real transition to
	// ready moves it.
	var proven, suspect []string
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		where := fmt.Sprintf("pod %s/%s on %s: ", p.Namespace, p.Name, p.Spec.NodeName)
		if why := validatorFailure(p); why != "" {
			proven = append(proven, where+why)
			continue
		}
		if since, ok := readySince[p.Spec.NodeName]; ok && startedAt(p).Before(since) && meshed(meshes, p) {
			suspect = append(suspect, where+fmt.Sprintf("started %s, agent ready since %s",
				startedAt(p).UTC().Format(time.RFC3339), since.UTC().Format(time.RFC3339)))
		}
	}
	sort.Strings(proven)
	sort.Strings(suspect)
	const fix = "restart them so they start meshed (kubectl -n <namespace> delete pod <name>, or roll their workload); the repair controller (repair.enabled) does this by itself"
	switch {
	case len(proven) > 0:
		return fail(name, fmt.Sprintf("%d pod(s) run without redirection (their validator says so), %d more started before their node was ready", len(proven), len(suspect)),
			fix, append(proven, suspect...)...)
	case len(suspect) > 0:
		return fail(name, fmt.Sprintf("%d pod(s) started before their node's agent was ready and may run without redirection", len(suspect)),
			fix, suspect...)
	}
	return ok(name, "")
}
