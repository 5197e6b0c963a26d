package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mesh-cni/mesh-cni/internal/backend/finding"
	"github.com/mesh-cni/mesh-cni/internal/ctl/check"
	"github.com/mesh-cni/mesh-cni/internal/ctl/explain"
)

// newExplain is "what would ADD do for this pod". It lives here, not in the
// plugin, so the binary the runtime execs per pod does not carry a manifest
// parser; one tool answers both "is the node right" and "what would ADD do".
func newExplain(kube *kubeFlags) *cobra.Command {
	o := explain.NewOptions()
	timeout := 10 * time.Second
	var checkRules bool
	agentNS := check.DefaultNamespace
	cmd := &cobra.Command{
		Use:   "explain [NAMESPACE/]POD",
		Short: "Show whether ADD would redirect a pod, and the rules it would write",
		Long: `Shows whether ADD would redirect a pod, and the rules it would write, as an
"nft -f" script and as "iptables-restore --noflush" input per family,
without touching any network namespace.

With a pod name, the pod is read from the cluster (-n or NAMESPACE/ names
its namespace; default the kubeconfig's), and the chain entry is the one
the agent on the pod's node runs, which it publishes in its Node status
annotation ` + check.StatusAnnotation + ` (--config or --profile override it).
Reading needs get on that pod and on nodes.

Without a pod name, the pod comes from --pod and the --annotation and
--label flags, and the settings from --config, --profile, or the built-in
profiles (linkerd, istio, kuma, consul with their defaults).

With --check (a live pod only), the agent pod on the pod's node also
reports whether the pod's network namespace holds those rules: each
expected rule present or missing, and any rule of ours ADD does not write
as extra, per family and backend. Its pod-rules container finds the netns
by the pod's IPs in the runtime's netns dir (mounted read-only), reads the
rules with netlink or iptables-save and changes nothing; it compares them
with what ADD writes for that pod with the node's entry, the one shown
above. It is asked through the API server's pods/proxy, so this needs,
besides get on the pod and on nodes, list on pods and get on pods/proxy in
the agent's namespace (--agent-namespace); the endpoint listens on the
node's own address only and answers only about a pod named with its UID
(docs/permissions.md).

Exit codes: 0 for any decision (with --check: and the netns holds exactly
the rules); 1 when the input is invalid (the error ADD would fail with) or
the cluster or the agent cannot be read; 2 for a usage error; 3 with
--check when a rule is missing or extra.`,
		Example: `  kubectl mesh-cni explain -n shop web-0
  kubectl mesh-cni explain shop/web-0 -o yaml
  kubectl mesh-cni explain -n shop web-0 --check
  mesh-cnictl explain --config plugin.json --pod pod.yaml --format iptables
  mesh-cnictl explain --profile istio --annotation 'sidecar.istio.io/status={"containers":["istio-proxy"]}' --family ipv4`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("unexpected argument %q", args[1])
			}
			return nil
		},
		ValidArgsFunction: completePods(kube),
	}
	out := addOutput(cmd)
	o.AddFlags(cmd.Flags())
	cmd.Flags().DurationVar(&timeout, "timeout", timeout, "limit for each API call")
	cmd.Flags().BoolVar(&checkRules, "check", false, "also ask the agent on the pod's node whether the pod's netns holds the rules (read-only; exit 3 when not)")
	cmd.Flags().StringVar(&agentNS, "agent-namespace", agentNS, "namespace of the mesh-cni agent, for --check")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return runExplain(cmd, args, kube, &o, out, explainFlags{timeout: timeout, check: checkRules, agentNS: agentNS})
	}
	return cmd
}

// explainFlags are explain's own flags, besides the explain.Options.
type explainFlags struct {
	timeout time.Duration
	check   bool
	agentNS string
}

// validateExplain refuses a wrong command line before any API call.
func validateExplain(args []string, o *explain.Options, out *output, f explainFlags) error {
	if err := o.Validate(); err != nil {
		return usageError{err}
	}
	if f.check {
		switch {
		case len(args) == 0:
			return usagef("--check needs a live pod: NAMESPACE/POD or -n NAMESPACE POD")
		case o.ConfigPath != "" || o.Profile != "" || len(o.Annotations) > 0 || len(o.Labels) > 0 || o.Family != "":
			return usagef("--check compares with what ADD writes with the node's entry for the live pod: --config, --profile, --annotation, --label and --family do not apply")
		}
	}
	if err := out.validate(); err != nil {
		return err
	}
	if len(args) == 1 && o.PodPath != "" {
		return usagef("--pod and a pod name exclude each other")
	}
	return nil
}

// runExplain explains a manifest or a live pod and, with --check, asks
// the pod's agent whether its netns holds the rules.
func runExplain(cmd *cobra.Command, args []string, kube *kubeFlags, o *explain.Options, out *output, f explainFlags) error {
	if err := validateExplain(args, o, out, f); err != nil {
		return err
	}
	var node string
	var pod *corev1.Pod
	if len(args) == 1 {
		var err error
		if pod, err = fromCluster(cmd, kube, f.timeout, args[0], o); err != nil {
			return err
		}
		node = pod.Spec.NodeName
	}
	text, wide := out.text()
	var buf bytes.Buffer
	w := io.Writer(&buf)
	if text {
		w = cmd.OutOrStdout()
		if len(o.Entry) > 0 && o.ConfigPath == "" && o.Profile == "" {
			fmt.Fprintf(w, "chain entry: %s\n", o.EntrySource)
			if wide {
				fmt.Fprintf(w, "  %s\n", o.Entry)
			}
		}
	}
	res, err := explain.Explain(*o, w)
	if err != nil {
		return err
	}
	var rep *finding.Report
	if f.check {
		if rep, err = checkPod(cmd, kube, f, pod, text, w); err != nil {
			return err
		}
	}
	if !text {
		if err := out.print(cmd.OutOrStdout(), "Explanation", struct {
			Node string `json:"node,omitempty"`
			*explain.Result
			Check *finding.Report `json:"check,omitempty"`
		}{node, res, rep}); err != nil {
			return err
		}
	}
	if rep != nil && rulesDiffer(rep) {
		return errRulesDiffer
	}
	return nil
}

// checkPod is --check: the agent's report on the pod's netns, printed as
// text unless -o names a printer.
func checkPod(cmd *cobra.Command, kube *kubeFlags, f explainFlags, pod *corev1.Pod, text bool, w io.Writer) (*finding.Report, error) {
	client, err := newClient(kube, f.timeout)
	if err != nil {
		return nil, err
	}
	rep, where, err := podRules(cmd.Context(), client, f.agentNS, pod)
	if err != nil {
		return nil, err
	}
	if text {
		if err := writeFindings(w, where, rep); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// fromCluster reads the pod and, unless --config or --profile name the
// settings, the chain entry its node's agent published. It returns the
// pod.
func fromCluster(cmd *cobra.Command, kube *kubeFlags, timeout time.Duration, arg string, o *explain.Options) (*corev1.Pod, error) {
	ns, name, ok := strings.Cut(arg, "/")
	if !ok {
		name = arg
		var err error
		if ns, err = kube.kubeNamespace(); err != nil {
			return nil, fmt.Errorf("namespace from the kubeconfig: %w", err)
		}
	} else if n := kube.namespace(); n != "" && n != ns {
		return nil, usagef("%s names namespace %s, -n names %s", arg, ns, n)
	}
	if ns == "" || name == "" {
		return nil, usagef("%q: want POD or NAMESPACE/POD", arg)
	}
	client, err := newClient(kube, timeout)
	if err != nil {
		return nil, err
	}
	ctx := cmd.Context()
	pod, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get pod %s/%s: %w", ns, name, err)
	}
	pod.APIVersion, pod.Kind = "v1", "Pod"
	if o.PodManifest, err = json.Marshal(pod); err != nil {
		return nil, err
	}
	o.PodSource = "pod " + ns + "/" + name
	if o.ConfigPath != "" || o.Profile != "" {
		return pod, nil
	}
	if pod.Spec.NodeName == "" {
		return nil, fmt.Errorf("pod %s/%s is not scheduled yet: no node, so no chain entry; pass --config or --profile", ns, name)
	}
	n, err := client.CoreV1().Nodes().Get(ctx, pod.Spec.NodeName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get node %s of pod %s/%s: %w (or pass --config or --profile)", pod.Spec.NodeName, ns, name, err)
	}
	entry, err := nodeEntry(n)
	if err != nil {
		return nil, err
	}
	o.Entry = entry
	o.EntrySource = fmt.Sprintf("node %s (%s)", n.Name, check.StatusAnnotation)
	return pod, nil
}

// nodeEntry is the chain entry the node's agent published, or why none.
func nodeEntry(n *corev1.Node) ([]byte, error) {
	st, err := check.ParseAgentStatus(n)
	switch {
	case err != nil:
		return nil, fmt.Errorf("node %s: %w", n.Name, err)
	case st == nil:
		return nil, fmt.Errorf("node %s has no %s annotation: no mesh-cni agent has run there; pass --config or --profile", n.Name, check.StatusAnnotation)
	case len(st.Entry) == 0 && !st.Ready:
		return nil, fmt.Errorf("the agent on node %s is not ready (%s) and publishes no chain entry; pass --config or --profile", n.Name, st.Reason)
	case len(st.Entry) == 0:
		return nil, fmt.Errorf("the agent on node %s (%s) publishes no chain entry (an agent older than this CLI); pass --config or --profile", n.Name, st.Version)
	}
	return st.Entry, nil
}

// completePods offers the pods of the namespace for POD.
func completePods(kube *kubeFlags) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ns, err := kube.kubeNamespace()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		client, err := newClient(kube, 5*time.Second)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		pods, err := client.CoreV1().Pods(ns).List(cmd.Context(), metav1.ListOptions{})
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []string
		for _, p := range pods.Items {
			if strings.HasPrefix(p.Name, toComplete) {
				names = append(names, p.Name)
			}
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}
