package chart

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// warnings collects the API server's warnings (deprecated APIs, unknown
// fields): a valid manifest gets none.
type warnings struct {
	sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.Lock()
	w.list = append(w.list, text)
	w.Unlock()
}

func (w *warnings) take() []string {
	w.Lock()
	defer w.Unlock()
	l := w.list
	w.list = nil
	return l
}

type apiClient struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
	warn   *warnings
}

func newAPIClient(t *testing.T) (*testenv.Env, *apiClient) {
	env := testenv.Start(t)
	cfg := rest.CopyConfig(env.Config)
	w := &warnings{}
	cfg.WarningHandler = w
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &apiClient{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)), warn: w}
	c.installCRDs(t)
	for _, ns := range []string{"mesh-cni", "linkerd-cni"} {
		c.ensureNamespace(t, ns, "privileged")
	}
	return env, c
}

func (c *apiClient) installCRDs(t *testing.T) {
	ctx := context.Background()
	b, err := os.ReadFile(filepath.Join("testdata", "crds.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Objects(string(b))
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	for _, o := range objs {
		_, err := c.dyn.Resource(gvr).Create(ctx, &unstructured.Unstructured{Object: o.Raw}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("CRD %s: %v", o.Name, err)
		}
		deadline := time.Now().Add(testenv.Timeout())
		for {
			u, err := c.dyn.Resource(gvr).Get(ctx, o.Name, metav1.GetOptions{})
			if err == nil && established(u) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("CRD %s not established", o.Name)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	c.mapper.Reset()
}

func established(u *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, x := range conds {
		m, _ := x.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

func (c *apiClient) ensureNamespace(t *testing.T, name, level string) {
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	ns := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": name, "labels": map[string]any{"pod-security.kubernetes.io/enforce": level}},
	}}
	if _, err := c.dyn.Resource(gvr).Create(context.Background(), ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// dryRun applies obj server-side with dryRun=All and strict field
// validation: the API server runs defaulting, validation and admission and
// stores nothing.
func (c *apiClient) dryRun(ctx context.Context, obj map[string]any) error {
	return c.apply(ctx, obj, true)
}

// resource is the client for u's kind, in u's namespace where the kind
// is namespaced.
func (c *apiClient) resource(u *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := u.GroupVersionKind()
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", gvk, err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return c.dyn.Resource(m.Resource).Namespace(u.GetNamespace()), nil
	}
	return c.dyn.Resource(m.Resource), nil
}

// remove deletes obj (gone already is fine).
func (c *apiClient) remove(ctx context.Context, obj map[string]any) error {
	u := &unstructured.Unstructured{Object: obj}
	ri, err := c.resource(u)
	if err != nil {
		return err
	}
	if err := ri.Delete(ctx, u.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// apply applies obj server-side (stored unless dry), strictly validated.
func (c *apiClient) apply(ctx context.Context, obj map[string]any, dry bool) error {
	u := &unstructured.Unstructured{Object: obj}
	ri, err := c.resource(u)
	if err != nil {
		return err
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	force := true
	opts := metav1.PatchOptions{FieldManager: "mesh-cni-chart-test", Force: &force, FieldValidation: "Strict"}
	if dry {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err = ri.Patch(ctx, u.GetName(), types.ApplyPatchType, b, opts)
	return err
}

func (c *apiClient) validate(t *testing.T, objs map[string]any) {
	t.Helper()
	var ids []string
	for id := range objs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		o := objs[id].(map[string]any)
		if err := c.dryRun(context.Background(), o); err != nil {
			t.Errorf("%s rejected by the API server: %v", id, err)
		}
		if w := c.warn.take(); len(w) > 0 {
			t.Errorf("%s: API server warnings: %s", id, strings.Join(w, "; "))
		}
	}
	if len(ids) < 8 {
		t.Errorf("only %d objects validated", len(ids))
	}
}

// Every render of the chart (defaults, each ci values file) and every
// kustomize build is accepted by a real kube-apiserver.
func TestServerSideDryRun(t *testing.T) {
	_, c := newAPIClient(t)
	for name, vals := range valueFiles(t) {
		t.Run("values-"+name, func(t *testing.T) {
			ns := "mesh-cni"
			if name == "linkerd" {
				ns = "linkerd-cni"
			}
			r, err := Render(chartDir, Options{Namespace: ns, Values: vals})
			if err != nil {
				t.Fatal(err)
			}
			objs, err := Objects(r.Manifest)
			if err != nil {
				t.Fatal(err)
			}
			m := map[string]any{}
			for _, o := range objs {
				m[o.Kind+"/"+o.Name] = o.Raw
			}
			c.validate(t, m)
		})
	}
	for _, p := range Platforms {
		t.Run("overlay-"+p, func(t *testing.T) {
			c.validate(t, build(t, filepath.Join(kustomizeDir, "overlays", p)))
		})
	}
}

// The agent pod is admitted where the namespace is labelled as NOTES.txt
// says (enforce=privileged), and Pod Security rejects it otherwise: the
// label is needed, and the docs are right to ask for it.
func TestPodSecurityLabelNeeded(t *testing.T) {
	env, c := newAPIClient(t)
	r := render(t, "", "", nil)
	ds := r.get(t, "DaemonSet", "mesh-cni")
	tmpl := path(ds, "spec", "template").(map[string]any)
	b, _ := json.Marshal(tmpl["spec"])
	var spec corev1.PodSpec
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	spec.NodeName = "node-a"
	for level, admitted := range map[string]bool{"privileged": true, "baseline": false} {
		ns := "psa-" + level
		c.ensureNamespace(t, ns, level)
		if _, err := env.Token(context.Background(), ns, "mesh-cni", 10*time.Minute); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "mesh-cni-x", Namespace: ns}, Spec: spec}
		_, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case admitted && err != nil:
			t.Errorf("enforce=%s: agent pod rejected: %v", level, err)
		case !admitted && err == nil:
			t.Errorf("enforce=%s: agent pod admitted; the PSA label would not be needed", level)
		case !admitted && !strings.Contains(err.Error(), "hostPath"):
			t.Errorf("enforce=%s: rejected for another reason: %v", level, err)
		}
	}
}
