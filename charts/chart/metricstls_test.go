package chart

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

const certManagerAPI = "cert-manager.io/v1"

// metricsTLS renders with metrics beyond loopback and the given metrics
// values, and the cluster's extra APIs.
func metricsTLS(t *testing.T, m map[string]any, apis ...string) (*Rendered, []Object, error) {
	t.Helper()
	m["bindAddress"] = ""
	r, err := Render(chartDir, Options{Namespace: "monitoring-cni", Values: map[string]any{"metrics": m}, APIVersions: apis})
	if err != nil {
		return nil, nil, err
	}
	objs, err := Objects(r.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	return r, objs, nil
}

// proxyTLS is the metrics proxy's --cert-dir and the Secret mounted there.
func proxyTLS(t *testing.T, objs []Object) (certDir, secret string) {
	t.Helper()
	for _, o := range objs {
		if o.Kind != "DaemonSet" {
			continue
		}
		for _, c := range path(o.Raw, "spec", "template", "spec", "containers").([]any) {
			c := c.(map[string]any)
			if c["name"] != "metrics-proxy" {
				continue
			}
			for _, a := range c["args"].([]any) {
				if v, ok := strings.CutPrefix(a.(string), "--cert-dir="); ok {
					certDir = v
				}
			}
		}
		for _, v := range path(o.Raw, "spec", "template", "spec", "volumes").([]any) {
			v := v.(map[string]any)
			if v["name"] == "metrics-tls" {
				secret = path(v, "secret", "secretName").(string)
			}
		}
		return certDir, secret
	}
	t.Fatal("no DaemonSet")
	return "", ""
}

func certificate(objs []Object) map[string]any {
	for _, o := range objs {
		if o.Kind == "Certificate" {
			return o.Raw
		}
	}
	return nil
}

// The three sources of the metrics proxy's certificate: self-signed (the
// default; NOTES say scrapers must pin it, and how), a Secret the user
// gives, and cert-manager (a Certificate only where the cluster serves
// cert-manager.io/v1; refused with a clear message elsewhere).
func TestMetricsTLSModes(t *testing.T) {
	// Self-signed.
	r, objs, err := metricsTLS(t, map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	if dir, secret := proxyTLS(t, objs); dir != "" || secret != "" || certificate(objs) != nil {
		t.Errorf("self-signed: --cert-dir=%q, Secret %q, Certificate %v", dir, secret, certificate(objs) != nil)
	}
	for _, want := range []string{"self-signed", "must pin it", "openssl s_client -connect <node address>:9197 -showcerts", "server_name\nmesh-cni-metrics-proxy", "metrics.certManager.enabled=true", "metrics.tlsSecretName"} {
		if !strings.Contains(r.Notes, want) {
			t.Errorf("self-signed: NOTES do not say %q:\n%s", want, r.Notes)
		}
	}

	// A Secret the user gives.
	r, objs, err = metricsTLS(t, map[string]any{"tlsSecretName": "scrape-tls"})
	if err != nil {
		t.Fatal(err)
	}
	if dir, secret := proxyTLS(t, objs); dir != "/etc/mesh-cni/metrics-tls" || secret != "scrape-tls" || certificate(objs) != nil {
		t.Errorf("tlsSecretName: --cert-dir=%q, Secret %q, Certificate %v", dir, secret, certificate(objs) != nil)
	}
	if strings.Contains(r.Notes, "pin") || !strings.Contains(r.Notes, "Secret scrape-tls") {
		t.Errorf("tlsSecretName: NOTES:\n%s", r.Notes)
	}

	metricsTLSCertManager(t)

	// Refusals: no cert-manager API, no issuer, metrics on loopback.
	noIssuer := certManagerValues()
	delete(noIssuer["certManager"].(map[string]any), "issuerRef")
	for _, c := range []struct {
		name string
		vals map[string]any
		apis []string
		want []string
	}{
		{"without the cert-manager API", certManagerValues(), nil, []string{"metrics.certManager.enabled=true", "cert-manager.io/v1", "--api-versions"}},
		{"without an issuer", noIssuer, []string{certManagerAPI}, []string{"metrics.certManager.issuerRef.name"}},
	} {
		if _, _, err := metricsTLS(t, c.vals, c.apis...); err == nil {
			t.Errorf("%s: rendered", c.name)
		} else {
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: %v, want it to say %q", c.name, err, w)
				}
			}
		}
	}
	_, err = Render(chartDir, Options{Values: map[string]any{"metrics": certManagerValues()}, APIVersions: []string{certManagerAPI}})
	if err == nil || !strings.Contains(err.Error(), "metrics.bindAddress") {
		t.Errorf("cert-manager with metrics on loopback: %v, want a refusal naming metrics.bindAddress", err)
	}
}

// certManagerValues are metrics values that ask cert-manager for the
// proxy's certificate.
func certManagerValues() map[string]any {
	return map[string]any{"certManager": map[string]any{"enabled": true,
		"issuerRef": map[string]any{"name": "cluster-ca", "kind": "ClusterIssuer"}, "dnsNames": []any{"metrics.example.org"}}}
}

// metricsTLSCertManager checks cert-manager, with its API: a Certificate
// for the Service's names and the user's, from the issuer named, its Secret
// mounted into the proxy (under the name given, if one is).
func metricsTLSCertManager(t *testing.T) {
	r, objs, err := metricsTLS(t, certManagerValues(), certManagerAPI)
	if err != nil {
		t.Fatal(err)
	}
	c := certificate(objs)
	if c == nil {
		t.Fatal("cert-manager: no Certificate")
	}
	if c["apiVersion"] != certManagerAPI || path(c, "metadata", "name") != "mesh-cni-metrics" || path(c, "metadata", "namespace") != "monitoring-cni" {
		t.Errorf("Certificate %v %v", c["apiVersion"], c["metadata"])
	}
	spec := c["spec"].(map[string]any)
	if got := toString(spec["dnsNames"]); got != `["mesh-cni-metrics.monitoring-cni.svc","mesh-cni-metrics.monitoring-cni.svc.cluster.local","metrics.example.org"]` {
		t.Errorf("Certificate dnsNames %s", got)
	}
	if got := toString(spec["issuerRef"]); got != `{"group":"cert-manager.io","kind":"ClusterIssuer","name":"cluster-ca"}` {
		t.Errorf("Certificate issuerRef %s", got)
	}
	if !strings.Contains(toString(spec["usages"]), "server auth") {
		t.Errorf("Certificate usages %s", toString(spec["usages"]))
	}
	dir, secret := proxyTLS(t, objs)
	if dir != "/etc/mesh-cni/metrics-tls" || secret != "mesh-cni-metrics-tls" || spec["secretName"] != secret {
		t.Errorf("cert-manager: --cert-dir=%q, mounted Secret %q, Certificate's Secret %v", dir, secret, spec["secretName"])
	}
	if strings.Contains(r.Notes, "pin") || !strings.Contains(r.Notes, "server name mesh-cni-metrics.monitoring-cni.svc") {
		t.Errorf("cert-manager: NOTES:\n%s", r.Notes)
	}
	// The Secret cert-manager writes may be named.
	m := certManagerValues()
	m["tlsSecretName"] = "named-tls"
	if _, objs, err = metricsTLS(t, m, certManagerAPI); err != nil {
		t.Fatal(err)
	}
	if _, secret := proxyTLS(t, objs); secret != "named-tls" || path(certificate(objs), "spec", "secretName") != "named-tls" {
		t.Errorf("cert-manager with tlsSecretName: mounted %q, Certificate %v", secret, path(certificate(objs), "spec", "secretName"))
	}
}

// Helm's own capabilities decide: both CLIs render the Certificate with
// --api-versions cert-manager.io/v1 and refuse without it.
func TestMetricsCertManagerHelmCLIs(t *testing.T) {
	set := []string{"--set", "metrics.bindAddress=", "--set", "metrics.certManager.enabled=true", "--set", "metrics.certManager.issuerRef.name=ca"}
	for cli, bin := range helmCLIs(t) {
		env := append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
		base := append([]string{"template", "rel", chartDir, "-n", "mon", "--kube-version", KubeVersion}, set...)
		cmd := exec.Command(bin, append(base, "--api-versions", certManagerAPI)...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "kind: Certificate") {
			t.Errorf("%s with --api-versions %s: %v\n%.2000s", cli, certManagerAPI, err, out)
		}
		cmd = exec.Command(bin, base...)
		cmd.Env = env
		out, err = cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "needs cert-manager") {
			t.Errorf("%s without the API: %v, want the refusal:\n%.2000s", cli, err, out)
		}
	}
}
