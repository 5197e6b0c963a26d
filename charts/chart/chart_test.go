package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/config"
)

// valueFiles are the chart's ci/*-values.yaml files, plus the defaults.
func valueFiles(t *testing.T) map[string]map[string]any {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{"default": nil}
	for _, f := range files {
		v, err := ReadValues(f)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(filepath.Base(f), "-values.yaml")] = v
	}
	for _, p := range Platforms {
		if _, ok := out[p]; !ok {
			t.Errorf("ci/%s-values.yaml is missing: every preset needs one", p)
		}
	}
	if _, ok := out["linkerd"]; !ok {
		t.Error("ci/linkerd-values.yaml is missing")
	}
	return out
}

type rendered struct {
	objs  []Object
	notes string
}

func render(t *testing.T, release, ns string, vals map[string]any) rendered {
	t.Helper()
	r, err := Render(chartDir, Options{Release: release, Namespace: ns, Values: vals})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Objects(r.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	return rendered{objs, r.Notes}
}

// readSchema decodes the chart's values.schema.json into v.
func readSchema(t *testing.T, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
}

func (r rendered) get(t *testing.T, kind, name string) map[string]any {
	t.Helper()
	for _, o := range r.objs {
		if o.Kind == kind && (name == "" || o.Name == name) {
			return o.Raw
		}
	}
	t.Fatalf("no %s %q rendered", kind, name)
	return nil
}

func (r rendered) has(kind, name string) bool {
	for _, o := range r.objs {
		if o.Kind == kind && o.Name == name {
			return true
		}
	}
	return false
}

// path walks maps by key and lists by index ("0").
func path(v any, keys ...string) any {
	for _, k := range keys {
		switch t := v.(type) {
		case map[string]any:
			v = t[k]
		case []any:
			i := 0
			for _, c := range k {
				i = i*10 + int(c-'0')
			}
			if i >= len(t) {
				return nil
			}
			v = t[i]
		default:
			return nil
		}
	}
	return v
}

func container(t *testing.T, ds map[string]any) map[string]any {
	t.Helper()
	c, ok := path(ds, "spec", "template", "spec", "containers", "0").(map[string]any)
	if !ok {
		t.Fatal("DaemonSet has no container")
	}
	return c
}

// args returns the agent's flags as name → value.
func args(t *testing.T, ds map[string]any) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, a := range path(container(t, ds), "args").([]any) {
		s := a.(string)
		k, v, ok := strings.Cut(s, "=")
		if !ok || !strings.HasPrefix(k, "--") {
			t.Fatalf("arg %q is not --flag=value", s)
		}
		if _, dup := out[k]; dup {
			t.Fatalf("flag %s given twice", k)
		}
		out[k] = v
	}
	return out
}

// agentFlags reads the flag table of installer/README.md.
func agentFlags(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../installer/README.md")
	if err != nil {
		t.Fatal(err)
	}
	var flags []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(--[a-z0-9-]+)` \\|").FindAllStringSubmatch(string(b), -1) {
		flags = append(flags, m[1])
	}
	if len(flags) < 10 {
		t.Fatalf("found only %d flags in installer/README.md", len(flags))
	}
	sort.Strings(flags)
	return flags
}

func pluginConf(t *testing.T, r rendered) *config.NetConf {
	t.Helper()
	cm := r.get(t, "ConfigMap", "")
	raw, _ := path(cm, "data", "plugin.json").(string)
	var entry map[string]any
	if err := json.Unmarshal([]byte(raw), &entry); err != nil {
		t.Fatalf("plugin.json is not JSON: %v", err)
	}
	// As the runtime passes it: inside a conflist, with its cniVersion and name.
	entry["cniVersion"] = "1.0.0"
	entry["name"] = "k8s-pod-network"
	b, _ := json.Marshal(entry)
	conf, err := config.Parse(b)
	if err != nil {
		t.Fatalf("the plugin rejects the chart's chain entry: %v\n%s", err, raw)
	}
	return conf
}

// Every values file: rendered objects keep the chart's promises.
func TestRenderValueFiles(t *testing.T) {
	flags := agentFlags(t)
	for name, vals := range valueFiles(t) {
		t.Run(name, func(t *testing.T) {
			r := render(t, "mesh-cni", "mesh-cni", vals)
			for _, o := range r.objs {
				l, _ := path(o.Raw, "metadata", "labels").(map[string]any)
				for _, k := range []string{"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
					"app.kubernetes.io/managed-by", "helm.sh/chart"} {
					if l[k] == nil || l[k] == "" {
						t.Errorf("%s/%s lacks label %s", o.Kind, o.Name, k)
					}
				}
			}
			ds := r.get(t, "DaemonSet", "")
			sel := path(ds, "spec", "selector", "matchLabels").(map[string]any)
			if len(sel) != 2 || sel["app.kubernetes.io/name"] == nil || sel["app.kubernetes.io/instance"] == nil {
				t.Errorf("selector %v: want only name and instance (it is immutable)", sel)
			}
			checkSecurity(t, ds)

			got := args(t, ds)
			var names []string
			for k := range got {
				names = append(names, k)
			}
			sort.Strings(names)
			if !slices.Equal(names, flags) {
				t.Errorf("agent flags %v\nwant exactly installer/README.md's %v", names, flags)
			}
			c := container(t, ds)
			if p := path(c, "livenessProbe", "httpGet", "path"); p != "/healthz" {
				t.Errorf("livenessProbe path %v", p)
			}
			if p := path(c, "readinessProbe", "httpGet", "path"); p != "/readyz" {
				t.Errorf("readinessProbe path %v", p)
			}
			// Loopback unless the value file says otherwise (full: every
			// address); the kubelet probes where the agent listens.
			host := "127.0.0.1"
			if name == "full" {
				host = ""
			}
			if probe := got["--probe-addr"]; probe != host+":"+toString(path(c, "ports", "0", "containerPort")) {
				t.Errorf("--probe-addr %s: want the probes port on %q", probe, host)
			}
			for _, p := range []string{"livenessProbe", "readinessProbe"} {
				h, _ := path(c, p, "httpGet", "host").(string)
				if h != host {
					t.Errorf("%s host %v, want %q: the kubelet must probe the address the agent listens on", p, h, host)
				}
			}
			pluginConf(t, r)
			if !strings.Contains(r.notes, "rollout status daemonset/") {
				t.Errorf("NOTES.txt lacks the status command:\n%s", r.notes)
			}
		})
	}
}

func toString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// checkSecurity holds the least-privilege promises.
func checkSecurity(t *testing.T, ds map[string]any) {
	t.Helper()
	c := container(t, ds)
	sc, _ := c["securityContext"].(map[string]any)
	if sc["privileged"] != false || sc["allowPrivilegeEscalation"] != false || sc["readOnlyRootFilesystem"] != true {
		t.Errorf("securityContext %v: want privileged=false, allowPrivilegeEscalation=false, readOnlyRootFilesystem=true", sc)
	}
	if d := path(sc, "capabilities", "drop"); toString(d) != `["ALL"]` {
		t.Errorf("capabilities.drop %v, want [ALL]", d)
	}
	for _, a := range path(sc, "capabilities", "add").([]any) {
		if !slices.Contains([]string{"CHOWN", "DAC_OVERRIDE", "FOWNER"}, a.(string)) {
			t.Errorf("capability %v added; the agent only writes host files", a)
		}
	}
	if p := path(ds, "spec", "template", "spec", "securityContext", "seccompProfile", "type"); p != "RuntimeDefault" {
		t.Errorf("pod seccompProfile %v", p)
	}
	if path(ds, "spec", "template", "spec", "automountServiceAccountToken") != false {
		t.Error("the token must come from the projected volume only")
	}
	var hostPaths []string
	for _, v := range path(ds, "spec", "template", "spec", "volumes").([]any) {
		vol := v.(map[string]any)
		if vol["hostPath"] != nil {
			hostPaths = append(hostPaths, vol["name"].(string))
		}
		if vol["name"] == "token" && path(vol, "projected", "sources", "0", "serviceAccountToken") == nil {
			t.Error("token volume is not a projected service-account token")
		}
	}
	sort.Strings(hostPaths)
	if !slices.Equal(hostPaths, []string{"cni-bin-dir", "cni-net-dir", "host-usr", "netns-dir", "run-dir", "state-dir"}) &&
		!slices.Equal(hostPaths, []string{"cni-bin-dir", "cni-net-dir", "host-usr", "run-dir", "state-dir"}) {
		t.Errorf("hostPath volumes %v: want only the bin, conf, state and run dirs, /usr and (podRules) the netns dir", hostPaths)
	}
	// /usr is there only to look for the backend's tools.
	for _, m := range path(container(t, ds), "volumeMounts").([]any) {
		if path(m, "name") == "host-usr" && (path(m, "readOnly") != true || path(m, "mountPath") != "/host/usr") {
			t.Errorf("host /usr mounted as %v; want read-only at /host/usr (the agent's --host-tool-dirs)", m)
		}
		if path(m, "name") == "netns-dir" {
			t.Errorf("the agent container mounts the netns dir: only pod-rules reads it")
		}
	}
	checkPodRules(t, ds)
}

// checkPodRules holds the pod-rules container (podRules) to its promises:
// only SYS_ADMIN and NET_ADMIN, read-only root, no privilege escalation;
// the netns dir read-only with HostToContainer propagation (each netns is a
// bind mount made later), and nothing else of the host; the node's own
// address, never every address.
func checkPodRules(t *testing.T, ds map[string]any) {
	t.Helper()
	var c map[string]any
	for _, x := range path(ds, "spec", "template", "spec", "containers").([]any) {
		if path(x, "name") == "pod-rules" {
			c = x.(map[string]any)
		}
	}
	if c == nil {
		return // podRules turned off: no such container
	}
	sc, _ := c["securityContext"].(map[string]any)
	if sc["privileged"] != false || sc["allowPrivilegeEscalation"] != false || sc["readOnlyRootFilesystem"] != true ||
		toString(path(sc, "capabilities", "drop")) != `["ALL"]` || toString(path(sc, "capabilities", "add")) != `["SYS_ADMIN","NET_ADMIN"]` {
		t.Errorf("pod-rules securityContext %v", sc)
	}
	var mounts []string
	for _, m := range path(c, "volumeMounts").([]any) {
		mounts = append(mounts, path(m, "name").(string))
		if path(m, "readOnly") != true {
			t.Errorf("pod-rules mounts %v writable", m)
		}
		if path(m, "name") == "netns-dir" && (path(m, "mountPropagation") != "HostToContainer" || path(m, "mountPath") != "/host/var/run/netns") {
			t.Errorf("netns dir mounted as %v; want HostToContainer at /host/var/run/netns (--netns-dir)", m)
		}
	}
	if !slices.Equal(mounts, []string{"token", "netns-dir"}) {
		t.Errorf("pod-rules mounts %v, want only the token and the netns dir", mounts)
	}
	if a := toString(path(c, "args")); !strings.Contains(a, `"--host=$(POD_IP)"`) {
		t.Errorf("pod-rules args %s: want --host=$(POD_IP)", a)
	}
}

func volumePath(t *testing.T, ds map[string]any, name string) string {
	t.Helper()
	for _, v := range path(ds, "spec", "template", "spec", "volumes").([]any) {
		if path(v, "name") == name {
			return path(v, "hostPath", "path").(string)
		}
	}
	t.Fatalf("no volume %s", name)
	return ""
}

// The presets set the documented dirs and extras; explicit values win.
func TestPlatformPresets(t *testing.T) {
	type want struct {
		bin, conf, confFile string
		chained, quota, scc bool
		seLinux             string
	}
	cases := map[string]want{
		"":                {"/opt/cni/bin", "/etc/cni/net.d", "", true, false, false, ""},
		"gke":             {"/home/kubernetes/bin", "/etc/cni/net.d", "", true, true, false, ""},
		"openshift":       {"/var/lib/cni/bin", "/etc/cni/multus/net.d", "mesh-cni.conflist", false, false, true, "spc_t"},
		"k3s":             {"/var/lib/rancher/k3s/data/cni", "/var/lib/rancher/k3s/agent/etc/cni/net.d", "", true, false, false, ""},
		"microk8s":        {"/var/snap/microk8s/current/opt/cni/bin", "/var/snap/microk8s/current/args/cni-network", "", true, false, false, ""},
		"eks":             {"/opt/cni/bin", "/etc/cni/net.d", "", true, false, false, ""},
		"aks":             {"/opt/cni/bin", "/etc/cni/net.d", "", true, false, false, ""},
		"talos":           {"/opt/cni/bin", "/etc/cni/net.d", "", true, false, false, ""},
		"k3d":             {"/var/lib/rancher/k3s/data/cni", "/var/lib/rancher/k3s/agent/etc/cni/net.d", "", true, false, false, ""},
		"minikube":        {"/opt/cni/bin", "/etc/cni/net.d", "", true, false, false, ""},
		"rancher-desktop": {"/usr/libexec/cni", "/etc/cni/net.d", "", true, false, false, ""},
	}
	if len(cases) != len(Platforms)+1 {
		t.Fatalf("cases cover %d presets, chart has %d", len(cases)-1, len(Platforms))
	}
	for p, w := range cases {
		t.Run("preset-"+p, func(t *testing.T) {
			r := render(t, "", "", map[string]any{"platform": p})
			ds := r.get(t, "DaemonSet", "")
			a := args(t, ds)
			if got := volumePath(t, ds, "cni-bin-dir"); got != w.bin {
				t.Errorf("bin dir %s, want %s", got, w.bin)
			}
			if got := volumePath(t, ds, "cni-net-dir"); got != w.conf {
				t.Errorf("conf dir %s, want %s", got, w.conf)
			}
			if a["--conf-file-name"] != w.confFile || a["--chained"] != map[bool]string{true: "true", false: "false"}[w.chained] {
				t.Errorf("--conf-file-name=%s --chained=%s", a["--conf-file-name"], a["--chained"])
			}
			if r.has("ResourceQuota", "mesh-cni") != w.quota {
				t.Errorf("ResourceQuota rendered: %v, want %v", !w.quota, w.quota)
			}
			if r.has("SecurityContextConstraints", "mesh-cni") != w.scc || r.has("NetworkAttachmentDefinition", "mesh-cni") != w.scc {
				t.Errorf("SCC/NAD rendered, want %v", w.scc)
			}
			if got, _ := path(ds, "spec", "template", "spec", "securityContext", "seLinuxOptions", "type").(string); got != w.seLinux {
				t.Errorf("seLinux type %q, want %q", got, w.seLinux)
			}
		})
	}
	t.Run("explicit-wins", func(t *testing.T) {
		r := render(t, "", "", map[string]any{
			"platform":      "openshift",
			"cni":           map[string]any{"binDir": "/x/bin", "chained": true, "confFileName": ""},
			"openshift":     map[string]any{"networkAttachmentDefinition": map[string]any{"enabled": false}, "scc": map[string]any{"enabled": false}},
			"resourceQuota": map[string]any{"enabled": true},
		})
		ds := r.get(t, "DaemonSet", "")
		if got := volumePath(t, ds, "cni-bin-dir"); got != "/x/bin" {
			t.Errorf("bin dir %s, want the explicit /x/bin", got)
		}
		if got := volumePath(t, ds, "cni-net-dir"); got != "/etc/cni/multus/net.d" {
			t.Errorf("conf dir %s, want the preset's", got)
		}
		if a := args(t, ds); a["--chained"] != "true" || a["--conf-file-name"] != "mesh-cni.conflist" {
			t.Errorf("--chained=%s --conf-file-name=%s: explicit chained, preset file name", a["--chained"], a["--conf-file-name"])
		}
		if r.has("SecurityContextConstraints", "mesh-cni") || r.has("NetworkAttachmentDefinition", "mesh-cni") || !r.has("ResourceQuota", "mesh-cni") {
			t.Error("explicit extras did not win over the preset")
		}
	})
}

// A linkerd2-cni values file works unchanged, each value landing where
// mesh-cni keeps that setting.
func TestLinkerdValues(t *testing.T) {
	vals, err := ReadValues(filepath.Join(chartDir, "ci", "linkerd-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	r := render(t, "linkerd-cni", "linkerd-cni", vals)
	conf := pluginConf(t, r)
	l := conf.Meshes["linkerd"]
	if l.InboundPort != 4143 || l.OutboundPort != 4140 || l.ProxyUID == nil || *l.ProxyUID != 2102 || l.ProxyGID == nil || *l.ProxyGID != 2103 {
		t.Errorf("linkerd ports/ids: %+v", l)
	}
	if !slices.Equal(l.IgnoreInbound, []string{"4190", "4191", "25", "587"}) {
		t.Errorf("ignoreInboundPorts %v: want control and admin ports, then the user's", l.IgnoreInbound)
	}
	if !slices.Equal(l.IgnoreOutbound, []string{"443", "3306-3307"}) {
		t.Errorf("ignoreOutboundPorts %v", l.IgnoreOutbound)
	}
	if len(l.InboundPorts) != 0 {
		t.Errorf("portsToRedirect %v: empty means all", l.InboundPorts)
	}
	if conf.Backend != "iptables-legacy" || *conf.IPv6 || conf.LogLevel != "debug" {
		t.Errorf("backend %s ipv6 %v logLevel %s", conf.Backend, *conf.IPv6, conf.LogLevel)
	}
	// The agent's own pods are exempt, not its whole namespace.
	if conf.AgentNamespace != "linkerd-cni" || slices.Contains(conf.ExcludeNamespaces, "linkerd-cni") ||
		conf.Exempt("linkerd-cni", "linkerd-cni-mesh-cni-x7k2p") != "agent-pod" || conf.Exempt("linkerd-cni", "web-1") != "" {
		t.Errorf("agent namespace %s, excluded %v, prefix %s", conf.AgentNamespace, conf.ExcludeNamespaces, conf.AgentPodPrefix)
	}
	ds := r.get(t, "DaemonSet", "")
	a := args(t, ds)
	if a["--repair"] != "true" || !r.has("ClusterRole", "linkerd-cni-mesh-cni-repair") {
		t.Error("repairController.enabled=true did not turn repair on")
	}
	spec := path(ds, "spec", "template", "spec").(map[string]any)
	if toString(path(container(t, ds), "resources")) != `{"limits":{"memory":"200Mi"},"requests":{"cpu":"20m","memory":"40Mi"}}` {
		t.Errorf("linkerd2-cni resources not converted: %v", toString(path(container(t, ds), "resources")))
	}
	if path(spec, "affinity", "nodeAffinity") == nil {
		t.Error("nodeAffinity dropped")
	}
	if path(ds, "spec", "revisionHistoryLimit") != float64(5) || toString(path(ds, "spec", "updateStrategy", "rollingUpdate", "maxUnavailable")) != "2" {
		t.Error("revisionHistoryLimit/updateStrategy not taken")
	}
	if path(ds, "spec", "template", "metadata", "labels", "team") != "platform" || path(ds, "metadata", "labels", "linkerd.io/cni-resource") != "true" {
		t.Error("podLabels/commonLabels not applied")
	}
	if img := path(container(t, ds), "image"); img != "mesh-cni:"+appVersion(t) {
		t.Errorf("image %v: linkerd2-cni's image.name must not replace mesh-cni's", img)
	}
	if !strings.Contains(r.notes, "image.name/image.version (linkerd2-cni) are ignored") {
		t.Errorf("NOTES.txt does not warn about the ignored image:\n%s", r.notes)
	}
	// proxyGID -1 means no GID; the linkerd2-cni name wins over the profile.
	r = render(t, "", "", map[string]any{"proxyGID": -1, "destCNIBinDir": "/home/kubernetes/bin", "iptablesMode": "plain", "disableIPv6": false})
	conf = pluginConf(t, r)
	if g := conf.Meshes["linkerd"].ProxyGID; (g != nil && *g >= 0) || conf.Backend != "auto" || !*conf.IPv6 {
		t.Errorf("proxyGID -1 / iptablesMode plain / disableIPv6 false: %+v backend %s", conf.Meshes["linkerd"], conf.Backend)
	}
	if got := volumePath(t, r.get(t, "DaemonSet", ""), "cni-bin-dir"); got != "/home/kubernetes/bin" {
		t.Errorf("destCNIBinDir ignored: %s", got)
	}
}

// RBAC grants exactly what the enabled features use.
func TestRBAC(t *testing.T) {
	rules := func(r rendered, name string) string { return toString(path(r.get(t, "ClusterRole", name), "rules")) }
	base := render(t, "", "", nil)
	if got := rules(base, "mesh-cni"); got != `[{"apiGroups":[""],"resources":["pods"],"verbs":["get","list","watch"]},{"apiGroups":[""],"resources":["nodes"],"verbs":["get","patch"]},{"apiGroups":["","events.k8s.io"],"resources":["events"],"verbs":["create","patch"]}]` {
		t.Errorf("agent ClusterRole %s", got)
	}
	role := toString(path(base.get(t, "Role", "mesh-cni"), "rules"))
	if role != `[{"apiGroups":["apps"],"resourceNames":["mesh-cni"],"resources":["daemonsets"],"verbs":["get","list","watch"]},{"apiGroups":[""],"resourceNames":["mesh-cni-plugin"],"resources":["serviceaccounts/token"],"verbs":["create"]}]` {
		t.Errorf("Role %s: only get and watch on its own DaemonSet and tokens of the plugin's account", role)
	}
	if got := rules(base, "mesh-cni-plugin"); got != `[{"apiGroups":[""],"resources":["pods"],"verbs":["get"]}]` {
		t.Errorf("plugin ClusterRole %s: get pods only", got)
	}
	for policy, rule := range map[string]string{
		"evict":  `{"apiGroups":[""],"resources":["pods/eviction"],"verbs":["create"]}`,
		"delete": `{"apiGroups":[""],"resources":["pods"],"verbs":["delete"]}`,
		"label":  `{"apiGroups":[""],"resources":["pods/status"],"verbs":["patch"]}`,
	} {
		r := render(t, "", "", map[string]any{"repair": map[string]any{"policy": policy}})
		want := `[` + rule + `]`
		if got := rules(r, "mesh-cni-repair"); got != want {
			t.Errorf("repair policy %s: %s, want %s", policy, got, want)
		}
	}
	off := render(t, "", "", map[string]any{"repair": map[string]any{"enabled": false}})
	if off.has("ClusterRole", "mesh-cni-repair") || off.has("ClusterRoleBinding", "mesh-cni-repair") {
		t.Error("repair off still grants repair permissions")
	}
	none := render(t, "", "", map[string]any{"repair": map[string]any{"enabled": false}, "rbac": map[string]any{"create": false}})
	for _, o := range none.objs {
		if strings.HasPrefix(o.Kind, "Cluster") || strings.HasSuffix(o.Kind, "Role") || strings.HasSuffix(o.Kind, "RoleBinding") {
			t.Errorf("rbac.create=false still renders %s/%s", o.Kind, o.Name)
		}
	}
	for _, r := range []rendered{base, render(t, "", "", map[string]any{"platform": "openshift"})} {
		for _, o := range r.objs {
			if strings.Contains(toString(o.Raw["rules"]), `"*"`) {
				t.Errorf("%s/%s uses a wildcard", o.Kind, o.Name)
			}
		}
	}
}

// Bad input fails with a message that names the value.
func TestBadValues(t *testing.T) {
	cases := []struct {
		name string
		vals map[string]any
		want []string
	}{
		{"unknown preset", map[string]any{"platform": "gcp"}, []string{"platform", "gke"}},
		{"wrong type: logLevel", map[string]any{"logLevel": 3}, []string{"logLevel"}},
		{"unknown logLevel", map[string]any{"logLevel": "verbose"}, []string{"logLevel"}},
		{"wrong type: proxyUID", map[string]any{"meshes": map[string]any{"istio": map[string]any{"proxyUID": "root"}}}, []string{"proxyUID"}},
		{"wrong type: chained", map[string]any{"cni": map[string]any{"chained": "yes"}}, []string{"chained"}},
		{"relative bin dir", map[string]any{"cni": map[string]any{"binDir": "opt/cni/bin"}}, []string{"binDir"}},
		{"bad backend", map[string]any{"backend": "ebpf"}, []string{"backend"}},
		{"bad port", map[string]any{"meshes": map[string]any{"linkerd": map[string]any{"ignoreInboundPorts": []any{"80-"}}}}, []string{"ignoreInboundPorts"}},
		{"port out of range", map[string]any{"inboundProxyPort": 70000}, []string{"inboundProxyPort"}},
		{"typo", map[string]any{"tolerationz": []any{}}, []string{"tolerationz"}},
		{"linkerd iptablesMode", map[string]any{"iptablesMode": "ipvs"}, []string{"iptablesMode"}},
		{"repair needs rbac", map[string]any{"rbac": map[string]any{"create": false}}, []string{"repair.enabled", "rbac.create"}},
		{"linkerd repair needs rbac", map[string]any{"rbac": map[string]any{"create": false}, "repairController": map[string]any{"enabled": true}, "repair": map[string]any{"enabled": false}}, []string{"repair.enabled", "rbac.create"}},
		{"taint needs rbac", map[string]any{"rbac": map[string]any{"create": false}, "repair": map[string]any{"enabled": false}, "startupTaint": map[string]any{"enabled": true}}, []string{"startupTaint.enabled"}},
		{"conflicting bin dirs", map[string]any{"cni": map[string]any{"binDir": "/a"}, "destCNIBinDir": "/b"}, []string{"cni.binDir", "destCNIBinDir"}},
		{"conflicting backend", map[string]any{"backend": "nftables", "iptablesMode": "legacy"}, []string{"backend", "iptablesMode"}},
		{"standalone needs a file name", map[string]any{"cni": map[string]any{"chained": false}}, []string{"cni.confFileName"}},
		{"subdir needs chained", map[string]any{"cni": map[string]any{"chained": false, "confFileName": "x.conf", "subdirChaining": true}}, []string{"cni.subdirChaining"}},
		{"NAD needs non-chained", map[string]any{"openshift": map[string]any{"networkAttachmentDefinition": map[string]any{"enabled": true}}}, []string{"openshift.networkAttachmentDefinition.enabled"}},
		{"same ports", map[string]any{"metrics": map[string]any{"port": 9196}}, []string{"probes.port", "metrics.port"}},
		{"captureDNS needs dnsPort", map[string]any{"meshes": map[string]any{"linkerd": map[string]any{"captureDNS": true}}}, []string{"/meshes/linkerd", "dnsPort"}},
		{"custom needs its ports", map[string]any{"meshes": map[string]any{"custom": map[string]any{"sidecar": "envoy", "proxyUID": 5}}}, []string{"/meshes/custom", "inboundPort", "outboundPort"}},
		{"bad trustAnnotations", map[string]any{"meshes": map[string]any{"linkerd": map[string]any{"trustAnnotations": "yes"}}}, []string{"trustAnnotations"}},
		{"bad proxyGID", map[string]any{"meshes": map[string]any{"istio": map[string]any{"proxyGID": 4294967295}}}, []string{"proxyGID"}},
		{"bad proxyUID", map[string]any{"meshes": map[string]any{"istio": map[string]any{"proxyUID": -1}}}, []string{"proxyUID"}},
		{"bad subnet", map[string]any{"meshes": map[string]any{"istio": map[string]any{"includeSubnets": []any{"10.0.0.0/x"}}}}, []string{"includeSubnets"}},
		{"star in skipSubnets", map[string]any{"meshes": map[string]any{"istio": map[string]any{"skipSubnets": []any{"*"}}}}, []string{"skipSubnets"}},
		{"bad interface", map[string]any{"meshes": map[string]any{"istio": map[string]any{"excludeInterfaces": []any{"eth0:1"}}}}, []string{"excludeInterfaces"}},
		{"bad repair policy", map[string]any{"repair": map[string]any{"policy": "restart"}}, []string{"policy"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Render(chartDir, Options{Values: c.vals})
			if err == nil {
				t.Fatalf("rendered; want an error naming %v", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not name %q:\n%v", w, err)
				}
			}
		})
	}
}

// Settings reach the objects: each non-default in full-values.yaml shows up.
func TestFullValues(t *testing.T) {
	vals, err := ReadValues(filepath.Join(chartDir, "ci", "full-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	r := render(t, "rel", "net", vals)
	ds := r.get(t, "DaemonSet", "rel-meshnet")
	a := args(t, ds)
	for flag, want := range map[string]string{
		"--conf-file-name": "10-calico.conflist", "--chained": "true", "--subdir-chaining": "true",
		"--host-state-dir": "/var/lib/meshnet", "--host-run-dir": "/run/meshnet", "--log-level": "warn",
		"--probe-addr": ":19196", "--metrics-addr": "127.0.0.1:19198", "--daemonset-name": "rel-meshnet",
		"--startup-taint": "mesh-cni.io/not-ready", "--repair": "true", "--repair-policy": "label", "--uninstall-mode": "never",
	} {
		if a[flag] != want {
			t.Errorf("%s=%s, want %s", flag, a[flag], want)
		}
	}
	c := container(t, ds)
	if h := path(c, "readinessProbe", "httpGet", "host"); h != nil {
		t.Errorf("probes.bindAddress \"\": readinessProbe host %v, want none (the pod IP, the node's)", h)
	}
	if c["image"] != "registry.example.com/mesh-cni:v0.1.0-rc.1" || c["imagePullPolicy"] != "Always" {
		t.Errorf("image %v %v", c["image"], c["imagePullPolicy"])
	}
	spec := path(ds, "spec", "template", "spec").(map[string]any)
	if spec["priorityClassName"] != nil {
		t.Errorf("priorityClassName %v, want none", spec["priorityClassName"])
	}
	if spec["serviceAccountName"] != "meshnet-agent" || path(spec, "nodeSelector", "example.com/mesh") != "true" ||
		path(spec, "tolerations", "0", "key") != "node-role.kubernetes.io/control-plane" || path(spec, "imagePullSecrets", "0", "name") != "regcred" {
		t.Error("serviceAccount/nodeSelector/tolerations/imagePullSecrets not applied")
	}
	if path(ds, "spec", "template", "metadata", "annotations", "prometheus.io/scrape") != nil {
		t.Error("metrics.scrapeAnnotations=false still adds scrape annotations")
	}
	if volumePath(t, ds, "state-dir") != "/var/lib/meshnet" || volumePath(t, ds, "cni-bin-dir") != "/custom/cni/bin" {
		t.Error("dirs not applied")
	}
	conf := pluginConf(t, r)
	if conf.Backend != "nftables" || *conf.IPv6 || conf.LookupTimeout != "2500ms" || conf.AgentPodPrefix != "rel-meshnet-" {
		t.Errorf("chain entry: %+v", conf.Settings)
	}
	// The host paths reach the entry through the agent, which writes them.
	if a := args(t, ds); a["--host-state-dir"] != "/var/lib/meshnet" || a["--host-run-dir"] != "/run/meshnet" {
		t.Errorf("host dirs not passed to the agent: %v", a)
	}
	if !slices.Equal(conf.ExcludeNamespaces, []string{"kube-system", "monitoring"}) {
		t.Errorf("excludeNamespaces %v", conf.ExcludeNamespaces)
	}
	cu := conf.Meshes["custom"]
	if cu.Enabled == nil || !*cu.Enabled || cu.SelectAnnotation != "example.com/mesh=enabled" || cu.InterceptionMode != "TPROXY" ||
		!slices.Equal(cu.InboundPorts, []string{"80", "8080-8090"}) {
		t.Errorf("custom mesh %+v", cu)
	}
	if is := conf.Meshes["istio"]; !slices.Equal(is.IgnoreInbound, []string{"15020", "15021", "15090"}) || !slices.Equal(is.SkipSubnets, []string{"fd00::/8"}) ||
		!slices.Equal(is.SkipOutboundSubnets, []string{"169.254.169.254/32"}) {
		t.Errorf("istio mesh %+v", is)
	}
	if l := conf.Meshes["linkerd"]; l.Enabled == nil || *l.Enabled {
		t.Errorf("linkerd mesh %+v: want disabled", l)
	}
	if !r.has("ResourceQuota", "rel-meshnet") || r.has("Namespace", "net") {
		t.Error("resourceQuota/namespace")
	}
	if path(r.get(t, "ClusterRole", "rel-meshnet"), "metadata", "labels", "example.com/release") != "meshnet" {
		t.Error("commonLabels not on every object")
	}
}

// The chart's appVersion is the repository's VERSION, which `make image` tags.
func TestAppVersionIsVersion(t *testing.T) {
	v, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	c, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(c), "\nappVersion: "+strings.TrimSpace(string(v))+"\n") {
		t.Errorf("Chart.yaml appVersion is not VERSION (%s)", strings.TrimSpace(string(v)))
	}
}

// values.yaml shows every setting: each schema property other than the
// linkerd2-cni names has a default there, and each key there is in the schema.
func TestValuesDocumentSchema(t *testing.T) {
	var schema struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	readSchema(t, &schema)
	vals, err := ReadValues(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	compat := map[string]bool{"global": true, "inboundProxyPort": true, "outboundProxyPort": true, "proxyAdminPort": true,
		"proxyControlPort": true, "proxyUID": true, "proxyGID": true, "ignoreInboundPorts": true, "ignoreOutboundPorts": true,
		"portsToRedirect": true, "destCNINetDir": true, "destCNIBinDir": true, "iptablesMode": true, "disableIPv6": true,
		"useWaitFlag": true, "enablePSP": true, "privileged": true, "nodeAffinity": true, "repairController": true}
	for k := range schema.Properties {
		if _, ok := vals[k]; !ok && !compat[k] {
			t.Errorf("schema property %q has no default in values.yaml", k)
		}
	}
	for k := range vals {
		if _, ok := schema.Properties[k]; !ok {
			t.Errorf("values.yaml key %q is not in the schema", k)
		}
		if compat[k] {
			t.Errorf("linkerd2-cni name %q has a default in values.yaml; it must stay unset so mesh-cni's own value applies", k)
		}
	}
}

// On OpenShift the proxy runs under a namespace-range UID, so istio pods
// are judged from their spec, unless the values say otherwise.
func TestOpenShiftIstioTrust(t *testing.T) {
	for _, c := range []struct {
		vals map[string]any
		want *bool
	}{
		{map[string]any{}, nil},
		{map[string]any{"platform": "openshift"}, ptrBool(false)},
		{map[string]any{"platform": "openshift", "meshes": map[string]any{"istio": map[string]any{"trustAnnotations": true}}}, ptrBool(true)},
	} {
		got, ok := entryMeshes(t, render(t, "", "", c.vals))["istio"]["trustAnnotations"]
		if ok != (c.want != nil) || (ok && got != *c.want) {
			t.Errorf("%v: istio trustAnnotations %v in the chain entry, want %v", c.vals, got, c.want)
		}
	}
}

func ptrBool(b bool) *bool { return &b }

// images lists every "image" of the rendered containers, init containers
// included (the helm test pods too).
func images(v any) []string {
	var out []string
	switch t := v.(type) {
	case map[string]any:
		for k, c := range t {
			if s, ok := c.(string); ok && k == "image" {
				out = append(out, s)
			} else {
				out = append(out, images(c)...)
			}
		}
	case []any:
		for _, c := range t {
			out = append(out, images(c)...)
		}
	}
	return out
}

// image.digest pins every container to repository@digest (what a released
// chart sets); without it the tag is the appVersion. The Artifact Hub image
// annotation names the same tag.
func TestImageDigest(t *testing.T) {
	v, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(v))
	meta, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(meta), "image: mesh-cni:"+version+"\n") {
		t.Errorf("Chart.yaml's artifacthub.io/images does not name mesh-cni:%s", version)
	}
	digest := "sha256:" + strings.Repeat("ab", 32)
	for _, tc := range []struct {
		vals map[string]any
		want string
	}{
		{map[string]any{}, "mesh-cni:" + version},
		{map[string]any{"image": map[string]any{"repository": "registry.example/mesh-cni", "digest": digest}}, "registry.example/mesh-cni@" + digest},
		{map[string]any{"image": map[string]any{"tag": "v9.9.9", "digest": digest}}, "mesh-cni@" + digest},
	} {
		// Beyond loopback: the metrics-proxy container too.
		tc.vals["metrics"] = map[string]any{"bindAddress": ""}
		r := render(t, "mesh-cni", "mesh-cni", tc.vals)
		var all []string
		for _, o := range r.objs {
			all = append(all, images(o.Raw)...)
		}
		if len(all) < 2 { // the agent and the metrics proxy
			t.Fatalf("%v: only %d images rendered: %v", tc.vals, len(all), all)
		}
		for _, img := range all {
			if img != tc.want {
				t.Errorf("%v: image %q, want %q", tc.vals["image"], img, tc.want)
			}
		}
	}
}

// appVersion is the chart's appVersion: the release (VERSION).
func appVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// podRules is off by default (the only container with SYS_ADMIN):
// podRules.enabled=false leaves out the pod-rules container, its port and
// the netns dir; on it has both, held to checkPodRules, and the OpenShift
// SCC allows its two capabilities only then.
func TestPodRulesOff(t *testing.T) {
	if ds := render(t, "", "", nil).get(t, "DaemonSet", ""); strings.Contains(toString(ds), `"name":"pod-rules"`) {
		t.Error("the default render has the pod-rules container: podRules must be asked for")
	}
	for _, on := range []bool{true, false} {
		r := render(t, "", "", map[string]any{"podRules": map[string]any{"enabled": on}, "platform": "openshift"})
		ds := r.get(t, "DaemonSet", "")
		if on {
			checkPodRules(t, ds)
		}
		s := toString(path(ds, "spec", "template", "spec"))
		for _, want := range []string{`"name":"pod-rules"`, `"name":"netns-dir"`, `"containerPort":9199`} {
			if strings.Contains(s, want) != on {
				t.Errorf("podRules.enabled=%t: %s present %t", on, want, !on)
			}
		}
		caps := toString(path(r.get(t, "SecurityContextConstraints", ""), "allowedCapabilities"))
		if strings.Contains(caps, "SYS_ADMIN") != on || strings.Contains(caps, "NET_ADMIN") != on || !strings.Contains(caps, "CHOWN") {
			t.Errorf("podRules.enabled=%t: SCC allowedCapabilities %s", on, caps)
		}
	}
}
