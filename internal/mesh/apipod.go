package mesh

// APIPod is the part of a core/v1 Pod (JSON or YAML through sigs.k8s.io/yaml)
// that decides redirection. The plugin decodes API answers into it without
// linking client-go; explain decodes manifests into it.
type APIPod struct {
	Kind     string `json:"kind,omitempty"`
	Metadata struct {
		Namespace   string            `json:"namespace"`
		Name        string            `json:"name"`
		UID         string            `json:"uid"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		SecurityContext *APISecurityContext `json:"securityContext"`
		Containers      []APIContainer      `json:"containers"`
		InitContainers  []APIContainer      `json:"initContainers"`
	} `json:"spec"`
}

// APISecurityContext holds the identity fields of a pod or container
// securityContext.
type APISecurityContext struct {
	RunAsUser  *int64 `json:"runAsUser"`
	RunAsGroup *int64 `json:"runAsGroup"`
}

// APIContainer is the part of a core/v1 Container that decides redirection.
type APIContainer struct {
	Name            string              `json:"name"`
	Args            []string            `json:"args"`
	RestartPolicy   string              `json:"restartPolicy"`
	SecurityContext *APISecurityContext `json:"securityContext"`
	Env             []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	} `json:"env"`
}

// Pod converts to a Pod with its spec known.
func (p *APIPod) Pod() Pod {
	pod := Pod{
		Namespace:   p.Metadata.Namespace,
		Name:        p.Metadata.Name,
		UID:         p.Metadata.UID,
		Labels:      p.Metadata.Labels,
		Annotations: p.Metadata.Annotations,
		SpecKnown:   true,
	}
	sc := p.Spec.SecurityContext
	pod.Containers = containers(p.Spec.Containers, sc)
	pod.InitContainers = containers(p.Spec.InitContainers, sc)
	return pod
}

// containers converts, letting a container's securityContext override the
// pod's, as the kubelet does.
func containers(in []APIContainer, podSC *APISecurityContext) []Container {
	if len(in) == 0 {
		return nil
	}
	out := make([]Container, 0, len(in))
	for _, c := range in {
		mc := Container{Name: c.Name, Args: c.Args, RestartPolicy: c.RestartPolicy}
		for _, sc := range []*APISecurityContext{podSC, c.SecurityContext} {
			if sc == nil {
				continue
			}
			if sc.RunAsUser != nil {
				mc.RunAsUser = sc.RunAsUser
			}
			if sc.RunAsGroup != nil {
				mc.RunAsGroup = sc.RunAsGroup
			}
		}
		if len(c.Env) > 0 {
			mc.Env = make(map[string]string, len(c.Env))
			for _, e := range c.Env {
				mc.Env[e.Name] = e.Value
			}
		}
		out = append(out, mc)
	}
	return out
}
