package mesh

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/mesh-cni/mesh-cni/internal/echo"
	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// Decision is what Decide concludes about one pod.
type Decision struct {
	Meshed bool
	Mesh   string // the mesh whose contract decided, if any
	// Reason is short and of low cardinality (a metric label): one of the
	// Reason* constants.
	Reason string
	// NeedSpec: the annotations cannot decide. The caller fetches the pod
	// (containers, labels) and calls again with SpecKnown set.
	NeedSpec bool
	Spec     *rules.Spec // set when Meshed
	// Notes say why part of the proxy's identity is not exempt.
	Notes []string
}

// Reasons.
const (
	ReasonMeshed            = "meshed"
	ReasonNoSidecar         = "no-sidecar"          // no mesh's contract on the pod
	ReasonInjectDisabled    = "inject-disabled"     // the pod opted out
	ReasonInitContainerMode = "init-container-mode" // the mesh's own init container redirects
	ReasonProxyDisabled     = "proxy-disabled"      // istio DISABLE_ENVOY
	ReasonNotSidecar        = "not-sidecar"         // istio proxy as a gateway (proxy router)
	ReasonNotInjected       = "not-injected"        // istio-proxy without the injector's status
	ReasonInterceptionNone  = "interception-none"   // istio interceptionMode NONE
	ReasonNeedSpec          = "need-spec"
	ReasonNoAnnotations     = "no-annotations" // the runtime sent none: fetch the pod
	ReasonExcluded          = "excluded"       // for callers: excluded namespace or the agent's pod
	// With an error from Decide:
	ReasonConflict          = "conflict"           // several meshes' contracts on one pod
	ReasonInvalidAnnotation = "invalid-annotation" // a claimed pod's annotation is invalid
	ReasonProxyIdentity     = "proxy-identity"     // an app container runs as the proxy's uid
)

type verdict int

const (
	notMine verdict = iota // the pod does not carry this mesh's contract
	skipped                // it does, and it says: leave the pod alone
	needSpec
	meshed
)

type judgement struct {
	v      verdict
	reason string
	spec   rules.Spec // meshed: the pod's resolved Spec
	note   string     // why the proxy's gid is not exempt
}

// judge is one profile's reading of a pod: base is the mesh's resolved
// config; it returns an error only for a meshed pod whose annotations are
// invalid.
type judge func(cfg Config, base rules.Spec, pod Pod) (judgement, error)

var judges = map[string]judge{Linkerd: judgeLinkerd, Istio: judgeIstio, Kuma: judgeKuma, Consul: judgeConsul, Custom: judgeCustom}

// Decide judges pod against every enabled mesh of meshes, as written
// (omitted fields take the profile's defaults). It is NewSet and
// Set.Decide in one call; a caller that judges many pods builds the Set
// once.
func Decide(meshes map[string]Config, pod Pod, families []rules.Family) (Decision, error) {
	eff := make(map[string]Config, len(meshes))
	for name, c := range meshes {
		eff[name] = c.WithDefaults(name)
	}
	s, err := NewSet(eff)
	if err != nil {
		return Decision{}, err
	}
	return s.Decide(pod, families)
}

// Set is the meshes of a chain entry, resolved: each enabled mesh with the
// Spec its pods start from. It is built once per entry; deciding a pod
// applies no default and parses no setting again.
type Set struct {
	names []string // enabled meshes, sorted
	cfg   map[string]Config
	base  map[string]rules.Spec
}

// NewSet checks effective settings (every default already applied, as
// WithDefaults or a resolved chain entry gives them; nothing is defaulted
// here) and resolves each enabled mesh's base Spec. A disabled mesh is
// only checked for its name.
func NewSet(effective map[string]Config) (*Set, error) {
	s := &Set{cfg: map[string]Config{}, base: map[string]rules.Spec{}}
	for _, name := range slices.Sorted(maps.Keys(effective)) {
		if judges[name] == nil {
			return nil, fmt.Errorf("unknown mesh profile %q (want one of %s)", name, strings.Join(Profiles, ", "))
		}
		cfg := effective[name]
		if !cfg.enabled() {
			continue
		}
		base, err := cfg.base(name)
		if err != nil {
			return nil, err
		}
		s.names = append(s.names, name)
		s.cfg[name], s.base[name] = cfg, base
	}
	return s, nil
}

// Decide judges pod against every enabled mesh of the set. Each pod is
// judged by the contract it carries, so one node can serve several meshes.
// families are the address families the pod has (none: both).
//
// Without the spec (SpecKnown false) Annotations are trusted as complete: a
// nil map means the runtime sent none, and Decide asks for the spec.
func (s *Set) Decide(pod Pod, families []rules.Family) (Decision, error) {
	if pod.Annotations == nil && !pod.SpecKnown {
		return Decision{NeedSpec: true, Reason: ReasonNoAnnotations}, nil
	}
	if err := s.checkLimits(pod.Annotations); err != nil {
		return Decision{Reason: ReasonInvalidAnnotation}, err
	}
	var found []string
	var spec *rules.Spec
	var skip, need *Decision
	var notes []string
	for _, name := range s.names {
		j, err := judges[name](s.cfg[name], s.base[name], pod)
		if err != nil {
			var ie *IdentityError
			if errors.As(err, &ie) {
				return Decision{Mesh: name, Reason: ReasonProxyIdentity}, err
			}
			return Decision{Mesh: name, Reason: ReasonInvalidAnnotation}, err
		}
		switch j.v {
		case meshed:
			found = append(found, name)
			s := j.spec
			s.Families = podFamilies(families)
			spec = &s
			if j.note != "" {
				notes = append(notes, j.note)
			}
		case needSpec:
			if need == nil {
				need = &Decision{Mesh: name, NeedSpec: true, Reason: ReasonNeedSpec}
			}
		case skipped:
			if skip == nil {
				skip = &Decision{Mesh: name, Reason: j.reason}
			}
		}
	}
	switch {
	case len(found) > 1:
		return Decision{Reason: ReasonConflict}, fmt.Errorf("pod %s/%s carries the contracts of several meshes (%s); refusing to guess", pod.Namespace, pod.Name, strings.Join(found, ", "))
	case need != nil: // another mesh might claim it too
		return *need, nil
	case len(found) == 1:
		return Decision{Meshed: true, Mesh: found[0], Reason: ReasonMeshed, Spec: spec, Notes: notes}, nil
	case skip != nil:
		return *skip, nil
	}
	return Decision{Reason: ReasonNoSidecar}, nil
}

// podFamilies sorts the families; none means both, so a pod whose
// addresses are unknown has no unredirected family.
func podFamilies(in []rules.Family) []rules.Family {
	var out []rules.Family
	for _, f := range []rules.Family{rules.IPv4, rules.IPv6} {
		for _, g := range in {
			if f == g {
				out = append(out, f)
				break
			}
		}
	}
	if len(out) == 0 {
		return []rules.Family{rules.IPv4, rules.IPv6}
	}
	return out
}

// sidecar finds the proxy container: a container, or a native sidecar (an
// init container with restartPolicy Always).
func sidecar(pod Pod, name string) *Container {
	for i := range pod.Containers {
		if pod.Containers[i].Name == name {
			return &pod.Containers[i]
		}
	}
	for i := range pod.InitContainers {
		if pod.InitContainers[i].Name == name && pod.InitContainers[i].RestartPolicy == "Always" {
			return &pod.InitContainers[i]
		}
	}
	return nil
}

func hasInit(pod Pod, name string) bool {
	for _, c := range pod.InitContainers {
		if c.Name == name {
			return true
		}
	}
	return false
}

// annErr names the annotation and its value, both cut to a sane length
// (the reason may quote part of the value).
func annErr(key, val string, err error) error {
	return fmt.Errorf("annotation %s=%q: %s", key, echo.Clip(val), echo.Clip(err.Error()))
}

func trusted(cfg Config) bool { return cfg.TrustAnnotations == nil || *cfg.TrustAnnotations }

// HonouredAnnotations lists every pod annotation some profile reads (the
// custom profile's selectAnnotation aside), e.g. for a pod cache that keeps
// only what matters.
var HonouredAnnotations = []string{
	LinkerdProxyVersion, LinkerdInject, LinkerdSkipInboundPorts, LinkerdSkipOutboundPorts,
	LinkerdSkipSubnets, LinkerdProxyUID, LinkerdProxyGID,
	IstioStatus, IstioInject, IstioInterceptionMode, IstioTemplates, IstioProxyConfig,
	IstioIncludeOutboundRanges, IstioExcludeOutboundRanges, IstioIncludeInboundPorts,
	IstioExcludeInboundPorts, IstioIncludeOutboundPorts, IstioExcludeOutboundPorts, IstioExcludeInterfaces,
	KumaSidecarInjected, KumaConfig, KumaSidecarUID, KumaInboundPort, KumaOutboundPort, KumaIPFamilyMode,
	KumaExcludeInbound, KumaExcludeOutbound, KumaExcludeOutForUIDs, KumaExcludeInboundIPs, KumaExcludeOutIPs,
	KumaProbeProxyPort, KumaGateway, KumaBuiltinDNS, KumaBuiltinDNSPort,
	KumaDropInvalid, ConsulInjectStatus, ConsulMeshInjectStatus, ConsulTProxyStatus, ConsulRedirectConfig, ConsulDualStack,
}
