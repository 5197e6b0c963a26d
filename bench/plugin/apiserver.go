package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// benchNamespace holds the bench pods in the API server; the runtime args
// of every chain name the same namespace.
const benchNamespace = "bench"

// probePod is the pod each chain's rule check ADDs before timing.
const probePod = "probe"

// podName is the API name of bench pod i.
func podName(i int) string { return fmt.Sprintf("pod-%d", i) }

// cluster is the API server the lookups go to.
type cluster struct{ env *testenv.Env }

// loadPod reads the pod Istio's injector wrote (internal/testsupport/contract/testdata/istio).
func loadPod(path string) (*corev1.Pod, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pod := &corev1.Pod{}
	if err := yaml.UnmarshalStrict(b, pod); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if pod.Annotations["sidecar.istio.io/status"] == "" {
		return nil, fmt.Errorf("%s: not a pod injected by Istio (no sidecar.istio.io/status)", path)
	}
	return pod, nil
}

// startCluster starts etcd and kube-apiserver (internal/testsupport/testenv) and creates the
// namespace, its default service account (the ServiceAccount admission
// plugin wants it), the probe pod and pods pod-0..pods-1, each a copy of
// tmpl under its own name.
func startCluster(tmpl *corev1.Pod, pods int) (*cluster, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Scale(3*time.Minute))
	defer cancel()
	env, err := testenv.New(ctx)
	if err != nil {
		return nil, err
	}
	c := &cluster{env: env}
	if err := c.populate(ctx, tmpl, pods); err != nil {
		env.Stop()
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "API server %s up with %d pods in namespace %s (%.1f s)\n",
		env.Host, pods+1, benchNamespace, time.Since(start).Seconds())
	return c, nil
}

func (c *cluster) stop() { c.env.Stop() }

func (c *cluster) populate(ctx context.Context, tmpl *corev1.Pod, pods int) error {
	cli := c.env.Client.CoreV1()
	if _, err := cli.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNamespace}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if _, err := cli.ServiceAccounts(benchNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	names := []string{probePod}
	for i := range pods {
		names = append(names, podName(i))
	}
	var (
		mu    sync.Mutex
		first error
	)
	parallel(len(names), 8, func(i int) {
		_, err := cli.Pods(benchNamespace).Create(ctx, named(tmpl, names[i]), metav1.CreateOptions{})
		if err != nil {
			mu.Lock()
			if first == nil {
				first = fmt.Errorf("create pod %s/%s: %w", benchNamespace, names[i], err)
			}
			mu.Unlock()
		}
	})
	return first
}

// named is tmpl as the injector would have written it for pod name in the
// bench namespace: only the name, the namespace and the proxy's owner
// reference (ISTIO_META_OWNER) change.
func named(tmpl *corev1.Pod, name string) *corev1.Pod {
	p := tmpl.DeepCopy()
	oldOwner := "kubernetes://apis/v1/namespaces/" + p.Namespace + "/pods/" + p.Name
	p.Name, p.Namespace = name, benchNamespace
	p.ResourceVersion, p.UID = "", ""
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			for j := range cs[i].Env {
				if e := &cs[i].Env[j]; e.Name == "ISTIO_META_OWNER" && e.Value == oldOwner {
					e.Value = "kubernetes://apis/v1/namespaces/" + benchNamespace + "/pods/" + name
				}
			}
		}
	}
	return p
}

// writeJSONKubeconfig writes env's admin credentials as a kubeconfig in
// JSON, the form both plugins read (mesh-cni reads JSON only, client-go
// either).
func writeJSONKubeconfig(env *testenv.Env, path string) error {
	b64 := base64.StdEncoding.EncodeToString
	kc := map[string]any{
		"apiVersion": "v1", "kind": "Config", "current-context": "bench",
		"clusters": []any{map[string]any{"name": "bench", "cluster": map[string]any{
			"server": env.Host, "certificate-authority-data": b64(env.CAData)}}},
		"users": []any{map[string]any{"name": "admin", "user": map[string]any{
			"client-certificate-data": b64(env.Config.CertData), "client-key-data": b64(env.Config.KeyData)}}},
		"contexts": []any{map[string]any{"name": "bench", "context": map[string]any{"cluster": "bench", "user": "admin"}}},
	}
	b, err := json.MarshalIndent(kc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// runtimeAnnotations is what a CRI runtime passes in
// io.kubernetes.cri.pod-annotations: all of the pod's annotations.
func runtimeAnnotations(pod *corev1.Pod) map[string]string { return maps.Clone(pod.Annotations) }
