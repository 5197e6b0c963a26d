package main

import (
	"flag"
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/helmcli"
)

// containerArgs renders the chart with values (nil: its defaults) and
// returns the args of the named container of the agent's DaemonSet.
func containerArgs(t *testing.T, values map[string]any, container string) []string {
	t.Helper()
	r, err := helmcli.Render("../charts/mesh-cni", helmcli.Options{Values: values})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := helmcli.Objects(r.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.Kind != "DaemonSet" {
			continue
		}
		spec, _ := o.Raw["spec"].(map[string]any)
		tmpl, _ := spec["template"].(map[string]any)
		pod, _ := tmpl["spec"].(map[string]any)
		cs, _ := pod["containers"].([]any)
		for _, c := range cs {
			c, _ := c.(map[string]any)
			if c["name"] != container {
				continue
			}
			var args []string
			list, _ := c["args"].([]any)
			for _, a := range list {
				s, _ := a.(string)
				args = append(args, s)
			}
			return args
		}
	}
	t.Fatalf("no DaemonSet container %q in the rendered chart", container)
	return nil
}

// renderedArgs renders the chart with its default values and returns the
// args of the named container of the agent's DaemonSet, flag → value.
func renderedArgs(t *testing.T, container string) map[string]string {
	t.Helper()
	args := map[string]string{}
	for _, s := range containerArgs(t, nil, container) {
		name, val, ok := strings.Cut(strings.TrimPrefix(s, "--"), "=")
		if !strings.HasPrefix(s, "--") || !ok {
			t.Fatalf("container %s: arg %q is not --flag=value", container, s)
		}
		args[name] = val
	}
	return args
}

// TestFlagDefaultsAreTheChart: the agent run without flags is as safe as
// the DaemonSet the chart renders. Every flag's default is the value the
// chart passes, or one the agent resolves to the same thing; a flag the
// chart leaves out must default to its safe side.
func TestFlagDefaultsAreTheChart(t *testing.T) {
	args := renderedArgs(t, "agent")
	// Rendered values the agent resolves from its default at run time.
	sameAs := map[string]string{
		"node-name": "$(NODE_NAME)",                                         // the default reads NODE_NAME itself
		"namespace": "$(POD_NAMESPACE)",                                     // and POD_NAMESPACE
		"ca-path":   "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt", // "": ca.crt next to --token-path
		"log-level": "",                                                     // the chart's logLevel null: the default level
	}
	// Flags the chart does not pass, with the reason their default is safe.
	notRendered := map[string]string{}
	c := &config{}
	newFlagSet(c).VisitAll(func(f *flag.Flag) {
		got, ok := args[f.Name]
		delete(args, f.Name)
		if !ok {
			if _, known := notRendered[f.Name]; !known {
				t.Errorf("--%s: the chart does not set it; say why its default %q is safe", f.Name, f.DefValue)
			}
			return
		}
		if got == f.DefValue {
			return
		}
		if want, ok := sameAs[f.Name]; ok && got == want {
			return
		}
		t.Errorf("--%s: default %q, the chart renders %q", f.Name, f.DefValue, got)
	})
	for name, val := range args {
		t.Errorf("the chart passes --%s=%s, which the agent does not define", name, val)
	}
}

// TestNoAgentTokenForPlugin: without the plugin's ServiceAccount the agent
// would write its own token to the host; it refuses unless told.
func TestNoAgentTokenForPlugin(t *testing.T) {
	_, err := parseFlags([]string{"--plugin-service-account="})
	if err == nil || !strings.Contains(err.Error(), "--allow-agent-token-for-plugin") {
		t.Fatalf("empty --plugin-service-account: %v, want a refusal naming --allow-agent-token-for-plugin", err)
	}
	if _, err := parseFlags([]string{"--plugin-service-account=", "--allow-agent-token-for-plugin"}); err != nil {
		t.Fatalf("with --allow-agent-token-for-plugin: %v", err)
	}
}
