package chart

import (
	"strings"
	"testing"
)

// metrics.bindAddress: loopback (default) is the agent's plain HTTP with
// nothing extra; beyond loopback a metrics-proxy container serves it
// (restricted, the TLS Secret mounted into it alone) in front of the
// agent's metrics on 127.0.0.1:metrics.port+1, the ClusterRole may create
// the reviews, the metrics-reader ClusterRole exists (bound to no one), and
// the scrape annotations say https.
func TestMetricsBindAddress(t *testing.T) {
	for _, c := range []metricsBind{
		{nil, "127.0.0.1:9197", "", false, false, nil},
		{"127.0.0.1", "127.0.0.1:9197", "", false, false, nil},
		{"::1", "[::1]:9197", "", false, false, nil},
		{"", "127.0.0.1:9198", ":9197", true, false, nil},
		{"0.0.0.0", "127.0.0.1:9198", "0.0.0.0:9197", true, false, nil},
		{"fd00::5", "127.0.0.1:19000", "[fd00::5]:9197", true, true, 19000},
	} {
		metricsBindCase(t, c)
	}
	r := render(t, "", "", map[string]any{"metrics": map[string]any{"bindAddress": "", "tlsSecretName": "metrics-tls"}})
	if !strings.Contains(r.notes, "--clusterrole=mesh-cni-metrics-reader") {
		t.Errorf("NOTES.txt does not say how to bind the metrics-reader role:\n%s", r.notes)
	}
	if strings.Contains(render(t, "", "", nil).notes, "metrics") {
		t.Error("NOTES.txt talks about metrics on loopback")
	}
	ds := r.get(t, "DaemonSet", "mesh-cni")
	if !strings.Contains(toString(path(ds, "spec", "template", "spec", "volumes")), `{"name":"metrics-tls","secret":{"secretName":"metrics-tls"}}`) {
		t.Error("metrics.tlsSecretName: no Secret volume")
	}
	if _, err := Render(chartDir, Options{Values: map[string]any{"metrics": map[string]any{"bindAddress": "node-a"}}}); err == nil || !strings.Contains(err.Error(), "bindAddress") {
		t.Errorf("a host name as metrics.bindAddress: %v, want a schema error", err)
	}
	// The agent's internal port may not clash with the proxy's or the probes'.
	for _, m := range []map[string]any{
		{"bindAddress": "", "internalPort": 9197},
		{"bindAddress": "", "internalPort": 9196},
		{"bindAddress": "", "port": 65535},
	} {
		if _, err := Render(chartDir, Options{Values: map[string]any{"metrics": m}}); err == nil || !strings.Contains(err.Error(), "internalPort") {
			t.Errorf("metrics %v: %v, want a clash error naming metrics.internalPort", m, err)
		}
	}
}

// reviewRules are the ClusterRole rules the metrics proxy needs to check a
// scraper's token.
const reviewRules = `{"apiGroups":["authentication.k8s.io"],"resources":["tokenreviews"],"verbs":["create"]},{"apiGroups":["authorization.k8s.io"],"resources":["subjectaccessreviews"],"verbs":["create"]}`

// metricsBind is one metrics.bindAddress (with its TLS Secret and internal
// port) and what the chart must make of it.
type metricsBind struct {
	bind              any
	agentAddr, listen string
	beyond, certDir   bool // beyond loopback: the proxy runs; a TLS Secret is named
	internalPort      any
}

// metricsBindCase renders c and checks the agent's address, the containers,
// the RBAC and the scrape annotations; beyond loopback, the proxy too.
func metricsBindCase(t *testing.T, c metricsBind) {
	m := map[string]any{}
	vals := map[string]any{"metrics": m}
	if c.bind != nil {
		m["bindAddress"] = c.bind
	}
	if c.certDir {
		m["tlsSecretName"] = "metrics-tls"
	}
	if c.internalPort != nil {
		m["internalPort"] = c.internalPort
	}
	r := render(t, "", "", vals)
	ds := r.get(t, "DaemonSet", "mesh-cni")
	a := args(t, ds)
	if a["--metrics-addr"] != c.agentAddr {
		t.Errorf("bindAddress %v: agent --metrics-addr=%s, want %s", c.bind, a["--metrics-addr"], c.agentAddr)
	}
	containers := path(ds, "spec", "template", "spec", "containers").([]any)
	// The agent and, beyond loopback, the proxy (podRules is off by default).
	if len(containers) != map[bool]int{false: 1, true: 2}[c.beyond] {
		t.Fatalf("bindAddress %v: %d containers", c.bind, len(containers))
	}
	if strings.Contains(toString(container(t, ds)["volumeMounts"]), "metrics-tls") {
		t.Errorf("bindAddress %v: the TLS Secret is mounted into the agent", c.bind)
	}
	agentPorts := toString(container(t, ds)["ports"])
	if strings.Contains(agentPorts, `"metrics"`) == c.beyond {
		t.Errorf("bindAddress %v: agent ports %s", c.bind, agentPorts)
	}
	rules := toString(path(r.get(t, "ClusterRole", "mesh-cni"), "rules"))
	if strings.Contains(rules, reviewRules) != c.beyond {
		t.Errorf("bindAddress %v: ClusterRole %s; reviews wanted: %v", c.bind, rules, c.beyond)
	}
	if r.has("ClusterRole", "mesh-cni-metrics-reader") != c.beyond {
		t.Errorf("bindAddress %v: metrics-reader ClusterRole rendered: %v", c.bind, !c.beyond)
	}
	ann := path(ds, "spec", "template", "metadata", "annotations").(map[string]any)
	if (ann["prometheus.io/scrape"] == "true") != c.beyond || c.beyond && (ann["prometheus.io/scheme"] != "https" || ann["prometheus.io/port"] != "9197") {
		t.Errorf("bindAddress %v: annotations %v", c.bind, ann)
	}
	if c.beyond {
		metricsProxy(t, c, r, ds, containers[len(containers)-1].(map[string]any))
	}
}

// metricsProxy checks the metrics proxy container p of ds: its image,
// arguments, port, least-privilege securityContext, mounts and resources,
// and the metrics-reader role the chart leaves to the user to bind.
func metricsProxy(t *testing.T, c metricsBind, r rendered, ds map[string]any, p map[string]any) {
	if p["name"] != "metrics-proxy" {
		t.Fatalf("bindAddress %v: last container %v, want metrics-proxy", c.bind, p["name"])
	}
	if p["name"] != "metrics-proxy" || toString(p["command"]) != `["/mesh-cni-metrics-proxy"]` || p["image"] != container(t, ds)["image"] {
		t.Errorf("second container %s %v %v", p["name"], p["command"], p["image"])
	}
	pa := map[string]string{}
	for _, x := range p["args"].([]any) {
		k, v, _ := strings.Cut(x.(string), "=")
		pa[k] = v
	}
	wantCert := ""
	if c.certDir {
		wantCert = "/etc/mesh-cni/metrics-tls"
	}
	if pa["--listen-addr"] != c.listen || pa["--upstream"] != "http://"+c.agentAddr+"/metrics" || pa["--cert-dir"] != wantCert ||
		pa["--token-path"] != "/var/run/secrets/kubernetes.io/serviceaccount/token" {
		t.Errorf("bindAddress %v: proxy args %v", c.bind, pa)
	}
	if got := toString(p["ports"]); got != `[{"containerPort":9197,"name":"metrics","protocol":"TCP"}]` {
		t.Errorf("proxy ports %s", got)
	}
	sc := p["securityContext"].(map[string]any)
	if sc["runAsNonRoot"] != true || sc["runAsUser"] != float64(65534) || sc["readOnlyRootFilesystem"] != true ||
		sc["allowPrivilegeEscalation"] != false || toString(path(sc, "capabilities")) != `{"drop":["ALL"]}` {
		t.Errorf("proxy securityContext %s", toString(sc))
	}
	mounts := toString(p["volumeMounts"])
	if !strings.Contains(mounts, `"name":"token"`) || strings.Contains(mounts, "metrics-tls") != c.certDir || strings.Contains(mounts, "host") {
		t.Errorf("proxy volumeMounts %s", mounts)
	}
	if res := toString(p["resources"]); res != `{"limits":{"memory":"128Mi"},"requests":{"cpu":"5m","memory":"48Mi"}}` {
		t.Errorf("proxy resources %s", res)
	}
	if got := toString(path(r.get(t, "ClusterRole", "mesh-cni-metrics-reader"), "rules")); got != `[{"nonResourceURLs":["/metrics"],"verbs":["get"]}]` {
		t.Errorf("metrics-reader rules %s", got)
	}
	for _, o := range r.objs {
		if strings.HasSuffix(o.Kind, "Binding") && strings.Contains(toString(o.Raw["roleRef"]), "metrics-reader") {
			t.Errorf("%s/%s binds the metrics-reader role; the user binds it to their scraper", o.Kind, o.Name)
		}
	}
}
