package chart

import (
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// sep joins path segments (keys such as linkerd.io/cni-resource hold dots).
const sep = "\x1f"

// leaves flattens a values map to paths of its leaves (a list or an
// empty map is one leaf).
func leaves(prefix string, v map[string]any, out map[string]any) {
	for k, x := range v {
		p := k
		if prefix != "" {
			p = prefix + sep + k
		}
		if m, ok := x.(map[string]any); ok && len(m) > 0 {
			leaves(p, m, out)
			continue
		}
		out[p] = x
	}
}

// nested builds {a: {b: v}} from "a.b".
func nested(p string, v any) map[string]any {
	parts := strings.Split(p, sep)
	m := map[string]any{parts[len(parts)-1]: v}
	for i := len(parts) - 2; i >= 0; i-- {
		m = map[string]any{parts[i]: m}
	}
	return m
}

// sample is a value a user would set: the documented default, or, when
// that is empty, something of the same type.
func sample(v any) any {
	switch x := v.(type) {
	case string:
		if x == "" {
			return "x"
		}
	case bool:
		return !x
	case map[string]any:
		if len(x) == 0 {
			return map[string]any{"x": "y"}
		}
	case []any:
		if len(x) == 0 {
			return []any{"x"}
		}
	case nil:
		return "x"
	}
	return v
}

// istioCNIValues reads the Istio CNI chart's documented values from the
// Istio module the contract tests pin (hack/istio/go.mod):
// manifests/charts/istio-cni/values.yaml, whose keys are documented under
// _internal_defaults_do_not_set and set by users at the top level
// (templates/zzz_profile.yaml merges them), plus the keys zzz_profile.yaml
// reads itself (profile, compatibilityVersion, platform, global.platform).
func istioCNIValues(t *testing.T) map[string]any {
	out, err := exec.Command("go", "-C", "../../hack/istio", "list", "-m", "-f", "{{.Dir}}", "istio.io/istio").Output()
	if err != nil {
		t.Fatalf("locate the pinned istio.io/istio module: %v", err)
	}
	vals, err := ReadValues(filepath.Join(strings.TrimSpace(string(out)), "manifests/charts/istio-cni/values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := vals["_internal_defaults_do_not_set"].(map[string]any)
	if len(doc) < 20 {
		t.Fatalf("istio-cni values.yaml: %d documented keys; layout changed?", len(doc))
	}
	flat := map[string]any{}
	leaves("", doc, flat)
	flat["profile"] = "ambient"
	flat["compatibilityVersion"] = "1.28"
	flat["platform"] = "k3d"
	flat["global"+sep+"platform"] = "gke"
	return flat
}

// Values another chart documents, set one at a time on this chart: each is
// refused with an error that names it, or it means here what it means
// there (listed below), or, for linkerd2-cni's, it is mapped (TestLinkerdValues)
// or NOTES says it is ignored. Nothing is accepted and silently dropped.
func TestForeignValuesMappedOrRefused(t *testing.T) {
	// Same name, same meaning (Kubernetes fields of the DaemonSet or pod).
	same := map[string]string{
		"excludeNamespaces": "namespaces whose pods are never redirected",
		"podLabels":         "extra pod labels", "podAnnotations": "extra pod annotations", "daemonSetLabels": "DaemonSet labels",
		"affinity": "pod affinity", "tolerations": "pod tolerations", "terminationGracePeriodSeconds": "pod grace period",
		"extraInitContainers":    "init containers before the agent",
		"resources.requests.cpu": "container resources", "resources.requests.memory": "container resources",
		"updateStrategy.type": "DaemonSet update strategy", "updateStrategy.rollingUpdate.maxUnavailable": "DaemonSet update strategy",
		"seLinuxOptions": "pod SELinux options", "repair.enabled": "repair controller on/off",
		"imagePullSecrets": "pod imagePullSecrets", "priorityClassName": "pod priority class",
		"revisionHistoryLimit": "DaemonSet revisionHistoryLimit", "commonLabels.team": "labels on every object",
		"logLevel": "log level", "podLabels.team": "extra pod labels", "commonLabels.linkerd.io/cni-resource": "labels on every object",
		"nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms": "folded into affinity.nodeAffinity",
		"image.pullPolicy": "pull policy", "platform": "platform preset (Istio's names where mesh-cni has the preset)",
	}
	// linkerd2-cni names this chart maps (TestLinkerdValues checks where).
	mapped := map[string]bool{"inboundProxyPort": true, "outboundProxyPort": true, "ignoreInboundPorts": true, "ignoreOutboundPorts": true,
		"proxyAdminPort": true, "proxyControlPort": true, "portsToRedirect": true, "proxyUID": true, "proxyGID": true,
		"destCNINetDir": true, "destCNIBinDir": true, "iptablesMode": true, "disableIPv6": true, "repairController.enabled": true,
		"resources.cpu.request": true, "resources.cpu.limit": true, "resources.memory.limit": true, "resources.memory.request": true,
		"resources.ephemeral-storage.request": true, "resources.ephemeral-storage.limit": true}
	// Values whose default is also mesh-cni's behaviour: the test sets
	// another value (the documented file itself renders: TestLinkerdValues).
	changed := map[string]any{"repairController.logLevel": "debug", "repairController.logFormat": "json"}
	linkerd, err := ReadValues(filepath.Join(chartDir, "ci", "linkerd-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	lflat := map[string]any{}
	leaves("", linkerd, lflat)
	for name, flat := range map[string]map[string]any{"istio-cni": istioCNIValues(t), "linkerd2-cni": lflat} {
		keys := make([]string, 0, len(flat))
		for k := range flat {
			keys = append(keys, k)
		}
		dotted := func(k string) string { return strings.ReplaceAll(k, sep, ".") }
		sort.Strings(keys)
		var refused, kept, warned int
		for _, k := range keys {
			v := sample(flat[k])
			if a, ok := changed[dotted(k)]; ok {
				v = a
			}
			r, err := Render(chartDir, Options{Values: nested(k, v)})
			segs := strings.Split(k, sep)
			k := dotted(k)
			switch {
			case err != nil:
				if !names(err.Error(), segs) {
					t.Errorf("%s %s=%v: refused without naming it: %v", name, k, v, err)
				}
				refused++
			case same[k] != "" || (name == "linkerd2-cni" && mapped[k]):
				kept++
			case name == "linkerd2-cni" && strings.Contains(r.Notes, segs[0]) && strings.Contains(r.Notes, "ignored"):
				warned++
			default:
				t.Errorf("%s %s=%v is accepted and does nothing: map it or refuse it", name, k, v)
			}
		}
		t.Logf("%s: %d documented values: %d refused by name, %d same or mapped, %d ignored with a NOTES warning", name, len(keys), refused, kept, warned)
	}
}

// names says whether an error names the value at path segs: its last key,
// a dotted prefix of two or more keys, or its first key as the schema
// quotes it.
func names(msg string, segs []string) bool {
	if strings.Contains(msg, segs[len(segs)-1]) || strings.Contains(msg, "'"+segs[0]+"'") {
		return true
	}
	for i := 2; i <= len(segs); i++ {
		if strings.Contains(msg, strings.Join(segs[:i], ".")) {
			return true
		}
	}
	return false
}

// Istio's global values are refused with the mesh-cni value to set.
func TestIstioGlobalsNameTheValueToUse(t *testing.T) {
	for _, c := range []struct {
		global map[string]any
		want   string
	}{
		{map[string]any{"platform": "gke"}, "set platform: gke"},
		{map[string]any{"platform": "k3d"}, "set platform: k3d"},
		{map[string]any{"platform": "kind"}, "no mesh-cni preset: set platform to one of"},
		{map[string]any{"hub": "docker.io/istio"}, "image.repository"},
		{map[string]any{"tag": "1.28.0"}, "image.tag"},
		{map[string]any{"imagePullSecrets": []any{"regcred", "other"}}, "set imagePullSecrets: [{name: regcred}, {name: other}]"},
		{map[string]any{"logging": map[string]any{"level": "default:debug,ads:info"}}, "set logLevel: debug"},
		{map[string]any{"logging": map[string]any{"level": "none"}}, "set logLevel: error"},
		{map[string]any{"nativeNftables": true}, "set backend: nftables"},
		{map[string]any{"imagePullPolicy": "Always"}, "set image.pullPolicy: Always"},
	} {
		_, err := Render(chartDir, Options{Values: map[string]any{"global": c.global}})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("global %v: %v, want %q", c.global, err, c.want)
		}
	}
	if _, err := Render(chartDir, Options{Values: map[string]any{"global": map[string]any{}}}); err != nil {
		t.Errorf("empty global: %v", err)
	}
}
