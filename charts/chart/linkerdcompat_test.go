package chart

import (
	"strings"
	"testing"
)

// linkerdCompat renders what `linkerd check` reads in its linkerd-cni-plugin
// category (linkerd/linkerd2 pkg/healthcheck/healthcheck.go:864-962 @
// b24cd40): in the CNI namespace (cli/cmd/root.go:100, --cni-namespace,
// default linkerd-cni) the ConfigMap linkerd-cni-config (Get, existence
// only: :875), the ServiceAccount linkerd-cni (:917) and the DaemonSet
// linkerd-cni (:932, :949, whose status.desiredNumberScheduled and
// status.numberReady must match: :953-956); cluster-wide the ClusterRole
// (:887) and ClusterRoleBinding (:902) linkerd-cni. The status numbers come
// from the DaemonSet controller; what the chart decides is that a pod is
// counted ready only when the agent is (its readiness probe).
func TestLinkerdCompatObjects(t *testing.T) {
	for _, c := range []struct{ release, ns string }{{"linkerd-cni", "linkerd-cni"}, {"mesh-cni", "linkerd-cni"}, {"x", "other"}} {
		r := render(t, c.release, c.ns, map[string]any{"linkerdCompat": true})
		inNS := func(kind, name string) map[string]any {
			o := r.get(t, kind, name)
			if ns := path(o, "metadata", "namespace"); ns != c.ns {
				t.Errorf("%s %s in namespace %v, want %s", kind, name, ns, c.ns)
			}
			return o
		}
		inNS("ConfigMap", "linkerd-cni-config")
		inNS("ServiceAccount", "linkerd-cni")
		ds := inNS("DaemonSet", "linkerd-cni")
		r.get(t, "ClusterRole", "linkerd-cni")
		crb := r.get(t, "ClusterRoleBinding", "linkerd-cni")
		if path(crb, "roleRef", "name") != "linkerd-cni" || path(crb, "subjects", "0", "name") != "linkerd-cni" || path(crb, "subjects", "0", "namespace") != c.ns {
			t.Errorf("ClusterRoleBinding linkerd-cni: %v", crb)
		}
		pod := path(ds, "spec", "template", "spec")
		if path(pod, "serviceAccountName") != "linkerd-cni" {
			t.Errorf("DaemonSet runs as %v, want the ServiceAccount linkerd-cni", path(pod, "serviceAccountName"))
		}
		if path(container(t, ds), "readinessProbe", "httpGet", "path") != "/readyz" {
			t.Errorf("no readiness probe: numberReady would count agents that are not ready")
		}
		for _, o := range []map[string]any{ds, path(ds, "spec", "template").(map[string]any)} {
			if path(o, "metadata", "labels", "k8s-app") != "linkerd-cni" {
				t.Errorf("label k8s-app (linkerd2-cni's dashboards): %v", path(o, "metadata", "labels"))
			}
		}
		if a := args(t, ds); a["--daemonset-name"] != "linkerd-cni" {
			t.Errorf("--daemonset-name=%s", a["--daemonset-name"])
		}
	}
	// Off by default: none of those names.
	r := render(t, "rel", "linkerd-cni", nil)
	for _, k := range []string{"ConfigMap", "ServiceAccount", "DaemonSet", "ClusterRole", "ClusterRoleBinding"} {
		if r.has(k, "linkerd-cni") || r.has(k, "linkerd-cni-config") {
			t.Errorf("linkerdCompat off renders %s linkerd-cni", k)
		}
	}
	for _, vals := range []map[string]any{
		{"linkerdCompat": true, "fullnameOverride": "meshcni"},
		{"linkerdCompat": true, "rbac": map[string]any{"create": false}, "repair": map[string]any{"enabled": false}},
		{"linkerdCompat": true, "serviceAccount": map[string]any{"name": "sa"}},
	} {
		if _, err := Render(chartDir, Options{Values: vals}); err == nil || !strings.Contains(err.Error(), "linkerdCompat") {
			t.Errorf("%v: %v, want an error naming linkerdCompat", vals, err)
		}
	}
}
