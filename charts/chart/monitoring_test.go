package chart

import (
	"strings"
	"testing"
)

// renderCaps renders with the cluster serving apiVersions too.
func renderCaps(t *testing.T, vals map[string]any, apiVersions ...string) (rendered, error) {
	t.Helper()
	r, err := Render(chartDir, Options{Values: vals, APIVersions: apiVersions})
	if err != nil {
		return rendered{}, err
	}
	objs, err := Objects(r.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	return rendered{objs, r.Notes}, nil
}

// The monitors render only where the cluster serves their kind; without
// it the install goes on and NOTES says what was left out. Enabled with
// /metrics on loopback, which no scraper reaches, the render fails.
func TestMonitors(t *testing.T) {
	beyond := map[string]any{"bindAddress": ""}
	on := map[string]any{
		"metrics":        beyond,
		"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "prom"}, "interval": "30s"},
		"podMonitor":     map[string]any{"enabled": true, "endpoint": map[string]any{"authorization": map[string]any{"credentials": map[string]any{"name": "scrape", "key": "token"}}}},
	}
	t.Run("with the CRDs", func(t *testing.T) { monitorsWithCRDs(t, on) })
	t.Run("without the CRDs", func(t *testing.T) {
		r, err := renderCaps(t, on)
		if err != nil {
			t.Fatal(err)
		}
		for _, kind := range []string{"ServiceMonitor", "PodMonitor", "Service"} {
			for _, o := range r.objs {
				if o.Kind == kind {
					t.Errorf("%s %s rendered without the monitoring.coreos.com/v1 API", kind, o.Name)
				}
			}
		}
		for _, kind := range []string{"ServiceMonitor", "PodMonitor"} {
			if !strings.Contains(r.notes, "no "+kind+" was rendered") {
				t.Errorf("NOTES does not say the %s was left out:\n%s", kind, r.notes)
			}
		}
	})
	t.Run("off", func(t *testing.T) {
		r, err := renderCaps(t, nil, "monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PodMonitor")
		if err != nil {
			t.Fatal(err)
		}
		if r.has("ServiceMonitor", "mesh-cni") || r.has("PodMonitor", "mesh-cni") || r.has("Service", "mesh-cni-metrics") {
			t.Error("monitors rendered while off")
		}
		if strings.Contains(r.notes, "was rendered") {
			t.Errorf("NOTES warns about monitors while off:\n%s", r.notes)
		}
	})
	t.Run("loopback", func(t *testing.T) {
		_, err := renderCaps(t, map[string]any{"serviceMonitor": map[string]any{"enabled": true}}, "monitoring.coreos.com/v1/ServiceMonitor")
		if err == nil || !strings.Contains(err.Error(), "serviceMonitor.enabled needs metrics.bindAddress beyond loopback") {
			t.Errorf("ServiceMonitor on loopback metrics: %v", err)
		}
	})
	t.Run("bad interval", func(t *testing.T) {
		_, err := renderCaps(t, map[string]any{"metrics": beyond, "podMonitor": map[string]any{"enabled": true, "interval": "30 seconds"}})
		if err == nil || !strings.Contains(err.Error(), "interval") {
			t.Errorf("interval %q: %v", "30 seconds", err)
		}
	})
}

// extraEnv, extraVolumes and extraVolumeMounts are appended to the agent
// container and the pod, after the chart's own.
func TestExtras(t *testing.T) {
	r := render(t, "", "", map[string]any{
		"extraEnv":          []any{map[string]any{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}},
		"extraVolumes":      []any{map[string]any{"name": "ca", "configMap": map[string]any{"name": "corp-ca"}}},
		"extraVolumeMounts": []any{map[string]any{"name": "ca", "mountPath": "/etc/ssl/corp", "readOnly": true}},
	})
	ds := r.get(t, "DaemonSet", "")
	c := container(t, ds)
	last := func(v any) any {
		l := v.([]any)
		return l[len(l)-1]
	}
	if e := last(path(c, "env")); path(e, "name") != "HTTPS_PROXY" || path(e, "value") != "http://proxy:3128" {
		t.Errorf("last env %v", e)
	}
	if path(c, "env", "0", "name") != "NODE_NAME" {
		t.Errorf("chart's env replaced: %v", path(c, "env"))
	}
	if m := last(path(c, "volumeMounts")); path(m, "name") != "ca" || path(m, "mountPath") != "/etc/ssl/corp" {
		t.Errorf("last mount %v", m)
	}
	if v := last(path(ds, "spec", "template", "spec", "volumes")); path(v, "name") != "ca" || path(v, "configMap", "name") != "corp-ca" {
		t.Errorf("last volume %v", v)
	}
	if volumePath(t, ds, "cni-bin-dir") != "/opt/cni/bin" {
		t.Error("chart's volumes replaced")
	}
	for _, bad := range []map[string]any{
		{"extraEnv": []any{map[string]any{"value": "x"}}},
		{"extraVolumeMounts": []any{map[string]any{"name": "ca", "mountPath": "relative"}}},
	} {
		if _, err := Render(chartDir, Options{Values: bad}); err == nil {
			t.Errorf("%v rendered", bad)
		}
	}
}

// monitorsWithCRDs renders on with the monitoring.coreos.com/v1 API present
// and checks that the ServiceMonitor reaches the agents through the
// headless Service, and the PodMonitor through a named container port.
func monitorsWithCRDs(t *testing.T, on map[string]any) {
	r, err := renderCaps(t, on, "monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PodMonitor")
	if err != nil {
		t.Fatal(err)
	}
	sm := r.get(t, "ServiceMonitor", "mesh-cni")
	ep := path(sm, "spec", "endpoints", "0")
	if path(ep, "port") != "metrics" || path(ep, "scheme") != "https" || path(ep, "interval") != "30s" ||
		path(ep, "bearerTokenFile") != "/var/run/secrets/kubernetes.io/serviceaccount/token" || path(ep, "tlsConfig", "insecureSkipVerify") != true {
		t.Errorf("ServiceMonitor endpoint %v", ep)
	}
	if path(sm, "metadata", "labels", "release") != "prom" {
		t.Errorf("ServiceMonitor labels %v", path(sm, "metadata", "labels"))
	}
	// The ServiceMonitor selects the headless Service, which selects
	// the agent pods and has the port it names.
	svc := r.get(t, "Service", "mesh-cni-metrics")
	for k, v := range path(sm, "spec", "selector", "matchLabels").(map[string]any) {
		if path(svc, "metadata", "labels", k) != v {
			t.Errorf("ServiceMonitor selects %s=%v; the Service has %v", k, v, path(svc, "metadata", "labels", k))
		}
	}
	ds := r.get(t, "DaemonSet", "")
	for k, v := range path(svc, "spec", "selector").(map[string]any) {
		if path(ds, "spec", "template", "metadata", "labels", k) != v {
			t.Errorf("Service selects %s=%v; the agent pods have %v", k, v, path(ds, "spec", "template", "metadata", "labels", k))
		}
	}
	if path(svc, "spec", "clusterIP") != "None" || path(svc, "spec", "ports", "0", "name") != "metrics" || path(svc, "spec", "ports", "0", "port") != float64(9197) {
		t.Errorf("Service spec %v", path(svc, "spec"))
	}
	pm := r.get(t, "PodMonitor", "mesh-cni")
	pep := path(pm, "spec", "podMetricsEndpoints", "0")
	if path(pep, "port") != "metrics" || path(pep, "scheme") != "https" || path(pep, "authorization", "credentials", "name") != "scrape" || path(pep, "bearerTokenFile") != nil {
		t.Errorf("PodMonitor endpoint %v", pep)
	}
	// The PodMonitor's port is a container port of the agent pods.
	named := false
	for _, c := range path(ds, "spec", "template", "spec", "containers").([]any) {
		for _, p := range path(c, "ports").([]any) {
			named = named || path(p, "name") == "metrics"
		}
	}
	if !named {
		t.Error("no container port named metrics for the PodMonitor")
	}
	if strings.Contains(r.notes, "no ServiceMonitor") || strings.Contains(r.notes, "no PodMonitor") {
		t.Errorf("NOTES warns with the CRDs present:\n%s", r.notes)
	}
}
