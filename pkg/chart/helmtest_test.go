package chart

import (
	"context"
	"fmt"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/mesh-cni/mesh-cni/pkg/mesh"
)

// The `helm test` pod plays the contract of the first enabled of linkerd
// and istio with that profile's settings (pkg/mesh's defaults under the
// values), and the real API server admits it under Pod Security
// "restricted" in the namespace the hook creates.
func TestHelmTestPod(t *testing.T) {
	_, c := newAPIClient(t)
	off := false
	for _, tc := range []struct {
		name    string
		values  map[string]any
		profile string
		uid     int
		port    int
	}{
		{"default", nil, mesh.Linkerd, 0, 0},
		{"linkerd-ports", map[string]any{"meshes": map[string]any{"linkerd": map[string]any{"outboundPort": 5140, "proxyUID": 3000}}}, mesh.Linkerd, 3000, 5140},
		{"istio-only", map[string]any{"meshes": map[string]any{"linkerd": map[string]any{"enabled": off}, "istio": map[string]any{"proxyUID": 1000700000}}}, mesh.Istio, 1000700000, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := mesh.Config{}.WithDefaults(tc.profile)
			if tc.uid == 0 {
				tc.uid = int(*want.ProxyUID)
			}
			if tc.port == 0 {
				tc.port = want.OutboundPort
			}
			rel := "rel-" + tc.name
			r, err := Render(chartDir, Options{Release: rel, Values: tc.values})
			if err != nil {
				t.Fatal(err)
			}
			objs, err := Objects(r.Tests)
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for _, o := range objs {
				kinds = append(kinds, o.Kind)
			}
			if !slices.Equal(kinds, []string{"Namespace", "Pod"}) {
				t.Fatalf("test hooks %v, want a Namespace then a Pod", kinds)
			}
			pod := objs[1].Raw
			containers, _, _ := unstructured.NestedSlice(pod, "spec", "containers")
			if len(containers) != 2 {
				t.Fatalf("containers: %v", containers)
			}
			app, proxy := containers[0].(map[string]any), containers[1].(map[string]any)
			if proxy["name"] != want.Sidecar {
				t.Errorf("sidecar %v, want %s", proxy["name"], want.Sidecar)
			}
			if uid := number(proxy, "securityContext", "runAsUser"); uid != int64(tc.uid) {
				t.Errorf("proxy UID %d, want %d", uid, tc.uid)
			}
			if cmd := fmt.Sprint(app["command"]); cmd != fmt.Sprintf("[/mesh-cni-validator --outbound-port=%d]", tc.port) {
				t.Errorf("validator command %s, want outbound port %d", cmd, tc.port)
			}
			if uid := number(app, "securityContext", "runAsUser"); uid == int64(tc.uid) {
				t.Errorf("validator runs as the proxy UID %d: the rules exempt it", uid)
			}

			ns := objs[0].Raw
			gvr := schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
			_, err = c.dyn.Resource(gvr).Create(context.Background(), &unstructured.Unstructured{Object: ns}, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
			// What kube-controller-manager creates in every new namespace.
			sa := map[string]any{"apiVersion": "v1", "kind": "ServiceAccount",
				"metadata": map[string]any{"name": "default", "namespace": objs[0].Name}}
			_, err = c.dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}).
				Namespace(objs[0].Name).Create(context.Background(), &unstructured.Unstructured{Object: sa}, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
			if err := c.dryRun(context.Background(), pod); err != nil {
				t.Errorf("the API server refuses the test pod: %v", err)
			}
			if w := c.warn.take(); len(w) > 0 {
				t.Errorf("API server warnings: %v", w)
			}
			// The namespace enforces "restricted": a pod that may escalate is refused.
			bad := (&unstructured.Unstructured{Object: pod}).DeepCopy().Object
			bc, _, _ := unstructured.NestedSlice(bad, "spec", "containers")
			delete(bc[0].(map[string]any)["securityContext"].(map[string]any), "allowPrivilegeEscalation")
			_ = unstructured.SetNestedSlice(bad, bc, "spec", "containers")
			if err := c.dryRun(context.Background(), bad); err == nil {
				t.Errorf("namespace %s does not enforce restricted: a pod allowing privilege escalation was admitted", objs[0].Name)
			}
			c.warn.take()
		})
	}
}

// number reads an integer field of a decoded manifest (JSON numbers).
func number(obj map[string]any, path ...string) int64 {
	v, _, _ := unstructured.NestedFieldNoCopy(obj, path...)
	switch n := v.(type) {
	case float64:
		return int64(n)
	case int64:
		return n
	}
	return -1
}
