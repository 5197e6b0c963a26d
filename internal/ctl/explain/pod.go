package explain

import (
	"fmt"
	"net/netip"
	"os"

	"github.com/mesh-cni/mesh-cni/internal/mesh"
	"github.com/mesh-cni/mesh-cni/internal/rules"
	"sigs.k8s.io/yaml"
)

// workload is a pod-template owner (Deployment, StatefulSet, ...).
type workload struct {
	Kind string `json:"kind"`
	Spec struct {
		Template *manifest `json:"template"`
		// CronJob: spec.jobTemplate.spec.template
		JobTemplate *struct {
			Spec struct {
				Template *manifest `json:"template"`
			} `json:"spec"`
		} `json:"jobTemplate"`
	} `json:"spec"`
}

// manifest is a Kubernetes Pod (YAML or JSON, e.g. from
// "kubectl get pod -o yaml") with the status fields explain reads.
type manifest struct {
	mesh.APIPod
	Status struct {
		PodIP  string `json:"podIP"`
		PodIPs []struct {
			IP string `json:"ip"`
		} `json:"podIPs"`
	} `json:"status"`
}

// readPod reads a pod manifest file into a mesh.Pod with its spec known,
// and the families of its status.podIPs (none when it has no status).
func readPod(path string) (mesh.Pod, []rules.Family, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return mesh.Pod{}, nil, err
	}
	return parsePod(b, path)
}

// parsePod is readPod on the manifest's bytes; path names it in errors.
func parsePod(b []byte, path string) (mesh.Pod, []rules.Family, error) {
	var m manifest
	if err := yaml.Unmarshal(b, &m); err != nil {
		return mesh.Pod{}, nil, fmt.Errorf("%s: not a pod manifest: %w", path, err)
	}
	if m.Kind != "" && m.Kind != "Pod" {
		// A workload: judge the pods its template makes.
		var w workload
		if err := yaml.Unmarshal(b, &w); err != nil {
			return mesh.Pod{}, nil, fmt.Errorf("%s: %w", path, err)
		}
		tmpl := w.Spec.Template
		if tmpl == nil && w.Spec.JobTemplate != nil {
			tmpl = w.Spec.JobTemplate.Spec.Template
		}
		if tmpl == nil {
			return mesh.Pod{}, nil, fmt.Errorf("%s: kind %s has no pod template; want a Pod or a workload", path, m.Kind)
		}
		if tmpl.Metadata.Namespace == "" {
			tmpl.Metadata.Namespace = m.Metadata.Namespace
		}
		if tmpl.Metadata.Name == "" {
			tmpl.Metadata.Name = m.Metadata.Name + "-<pod>"
		}
		m = *tmpl
	}
	pod := m.Pod()
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	var fams []rules.Family
	ips := []string{m.Status.PodIP}
	for _, ip := range m.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	for _, s := range ips {
		if a, err := netip.ParseAddr(s); err == nil {
			f := rules.IPv6
			if a.Unmap().Is4() {
				f = rules.IPv4
			}
			fams = append(fams, f)
		}
	}
	return pod, fams, nil
}
