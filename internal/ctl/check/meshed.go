package check

import (
	"context"
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mesh-cni/mesh-cni/internal/mesh"
)

// meshes returns the mesh profiles of the installed chain entry (the
// ConfigMap's plugin.json), or every sidecar profile (mesh.Sidecars)
// when it cannot be read.
func (c *Cluster) meshes(ctx context.Context) map[string]mesh.Config {
	def := mesh.Sidecars()
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	l, err := c.Client.CoreV1().ConfigMaps(c.Opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: nameLabel + "=" + appName})
	if err != nil {
		return def
	}
	for _, cm := range l.Items {
		raw, ok := cm.Data["plugin.json"]
		if !ok {
			continue
		}
		var entry struct {
			Meshes map[string]mesh.Config `json:"meshes"`
		}
		if json.Unmarshal([]byte(raw), &entry) == nil && len(entry.Meshes) > 0 {
			return entry.Meshes
		}
	}
	return def
}

// meshed asks the plugin's own decision whether the pod is redirected.
func meshed(meshes map[string]mesh.Config, p *corev1.Pod) bool {
	mp := mesh.Pod{Namespace: p.Namespace, Name: p.Name, Labels: p.Labels, Annotations: p.Annotations, SpecKnown: true}
	if mp.Annotations == nil {
		mp.Annotations = map[string]string{}
	}
	for _, c := range p.Spec.Containers {
		mp.Containers = append(mp.Containers, container(p, c))
	}
	for _, c := range p.Spec.InitContainers {
		mp.InitContainers = append(mp.InitContainers, container(p, c))
	}
	d, err := mesh.Decide(meshes, mp, nil)
	return err == nil && d.Meshed
}

func container(p *corev1.Pod, c corev1.Container) mesh.Container {
	out := mesh.Container{Name: c.Name, Args: c.Args}
	if sc := p.Spec.SecurityContext; sc != nil {
		out.RunAsUser, out.RunAsGroup = sc.RunAsUser, sc.RunAsGroup
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			out.RunAsUser = sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			out.RunAsGroup = sc.RunAsGroup
		}
	}
	if c.RestartPolicy != nil {
		out.RestartPolicy = string(*c.RestartPolicy)
	}
	for _, e := range c.Env {
		if out.Env == nil {
			out.Env = map[string]string{}
		}
		out.Env[e.Name] = e.Value
	}
	return out
}
