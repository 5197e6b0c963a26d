package podcache

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/mesh-cni/mesh-cni/internal/agent/nodepods"
	"github.com/mesh-cni/mesh-cni/internal/mesh"
)

// FromPod is what the plugin needs of a pod: metadata and, per container,
// the effective user and group (container securityContext over the pod's),
// literal env values, args and restartPolicy (native sidecars).
func FromPod(p *corev1.Pod) *mesh.Pod {
	out := &mesh.Pod{
		Namespace:   p.Namespace,
		Name:        p.Name,
		UID:         string(p.UID),
		Labels:      p.Labels,
		Annotations: p.Annotations,
		SpecKnown:   true,
	}
	psc := p.Spec.SecurityContext
	for i := range p.Spec.InitContainers {
		out.InitContainers = append(out.InitContainers, container(&p.Spec.InitContainers[i], psc))
	}
	for i := range p.Spec.Containers {
		out.Containers = append(out.Containers, container(&p.Spec.Containers[i], psc))
	}
	return out
}

func container(c *corev1.Container, psc *corev1.PodSecurityContext) mesh.Container {
	mc := mesh.Container{Name: c.Name, Args: c.Args}
	if psc != nil {
		mc.RunAsUser = psc.RunAsUser
		mc.RunAsGroup = psc.RunAsGroup
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			mc.RunAsUser = sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			mc.RunAsGroup = sc.RunAsGroup
		}
	}
	// Only literal values: valueFrom needs the kubelet's view (secrets,
	// downward API) and no mesh setting we read is set that way.
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			continue
		}
		if mc.Env == nil {
			mc.Env = map[string]string{}
		}
		mc.Env[e.Name] = e.Value
	}
	if c.RestartPolicy != nil {
		mc.RestartPolicy = string(*c.RestartPolicy)
	}
	return mc
}

// slim is the shared informer's transform; the cache's own informer uses
// it too.
var slim = nodepods.Slim
