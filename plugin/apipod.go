package main

import (
	"encoding/json"
	"fmt"

	"github.com/mesh-cni/mesh-cni/pkg/mesh"
)

// apiPod is the part of a core/v1 Pod that mesh.Pod needs.
type apiPod struct {
	Metadata struct {
		Namespace   string            `json:"namespace"`
		Name        string            `json:"name"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		SecurityContext *securityContext `json:"securityContext"`
		Containers      []apiContainer   `json:"containers"`
		InitContainers  []apiContainer   `json:"initContainers"`
	} `json:"spec"`
}

type securityContext struct {
	RunAsUser  *int64 `json:"runAsUser"`
	RunAsGroup *int64 `json:"runAsGroup"`
}

type apiContainer struct {
	Name            string           `json:"name"`
	Args            []string         `json:"args"`
	RestartPolicy   string           `json:"restartPolicy"`
	SecurityContext *securityContext `json:"securityContext"`
	Env             []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	} `json:"env"`
}

func decodeAPIPod(b []byte) (mesh.Pod, error) {
	var p apiPod
	if err := json.Unmarshal(b, &p); err != nil {
		return mesh.Pod{}, fmt.Errorf("decode pod: %w", err)
	}
	pod := mesh.Pod{
		Namespace:   p.Metadata.Namespace,
		Name:        p.Metadata.Name,
		Labels:      p.Metadata.Labels,
		Annotations: p.Metadata.Annotations,
		SpecKnown:   true,
	}
	podSC := p.Spec.SecurityContext
	pod.Containers = containers(p.Spec.Containers, podSC)
	pod.InitContainers = containers(p.Spec.InitContainers, podSC)
	return pod, nil
}

// containers converts, letting a container's securityContext override the
// pod's, as the kubelet does.
func containers(in []apiContainer, podSC *securityContext) []mesh.Container {
	out := make([]mesh.Container, 0, len(in))
	for _, c := range in {
		mc := mesh.Container{Name: c.Name, Args: c.Args, RestartPolicy: c.RestartPolicy}
		if podSC != nil {
			mc.RunAsUser, mc.RunAsGroup = podSC.RunAsUser, podSC.RunAsGroup
		}
		if c.SecurityContext != nil {
			if c.SecurityContext.RunAsUser != nil {
				mc.RunAsUser = c.SecurityContext.RunAsUser
			}
			if c.SecurityContext.RunAsGroup != nil {
				mc.RunAsGroup = c.SecurityContext.RunAsGroup
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
