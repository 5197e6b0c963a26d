package mesh

import (
	"strings"

	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// judgeCustom: a pod is meshed when it carries selectAnnotation ("key", or
// "key=value" for an exact value) and, if sidecar is set, runs that
// container (a container or native sidecar). The settings come from the
// config alone. With only sidecar set, every pod needs its spec looked up:
// prefer selectAnnotation.
func judgeCustom(cfg Config, base rules.Spec, pod Pod) (judgement, error) {
	if cfg.SelectAnnotation != "" {
		key, want, exact := strings.Cut(cfg.SelectAnnotation, "=")
		got, ok := pod.Annotations[strings.TrimSpace(key)]
		if !ok || (exact && got != want) {
			return judgement{v: notMine}, nil
		}
	}
	var proxy *Container
	if cfg.Sidecar != "" {
		if !pod.SpecKnown {
			return judgement{v: needSpec}, nil
		}
		if proxy = sidecar(pod, cfg.Sidecar); proxy == nil {
			return judgement{v: notMine}, nil
		}
	} else if !pod.SpecKnown && !trusted(cfg) {
		return judgement{v: needSpec}, nil
	}
	return meshedAs(base, pod, proxy)
}
