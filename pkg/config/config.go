// Package config parses the mesh-cni chain entry: the plugin's network
// configuration as the runtime passes it on stdin.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/types/create"

	"github.com/mesh-cni/mesh-cni/pkg/backend"
	"github.com/mesh-cni/mesh-cni/pkg/mesh"
	"github.com/mesh-cni/mesh-cni/pkg/node"
)

// Defaults for the keys of the chain entry.
const (
	DefaultBackend        = backend.Auto
	DefaultLogLevel       = "info"
	DefaultAgentNamespace = "mesh-cni"
	DefaultAgentPodPrefix = "mesh-cni-"
	DefaultLookupTimeout  = 5 * time.Second
	// MaxLookupTimeout keeps a pod's network setup bounded even when the
	// agent and the API server both hang.
	MaxLookupTimeout = time.Minute
)

// Backends are the accepted values of "backend".
var Backends = backend.Names

// LogLevels are the accepted values of "logLevel".
var LogLevels = []string{"debug", "info", "warn", "error"}

// NetConf is the chain entry. Field names follow docs/design.md.
type NetConf struct {
	types.NetConf

	LogLevel          string                 `json:"logLevel,omitempty"`
	Backend           string                 `json:"backend,omitempty"`
	IPv6              *bool                  `json:"ipv6,omitempty"`
	ExcludeNamespaces []string               `json:"excludeNamespaces,omitempty"`
	AgentNamespace    string                 `json:"agentNamespace,omitempty"`
	AgentPodPrefix    string                 `json:"agentPodPrefix,omitempty"`
	LookupTimeout     string                 `json:"lookupTimeout,omitempty"`
	Kubeconfig        string                 `json:"kubeconfig,omitempty"`
	AgentSocket       string                 `json:"agentSocket,omitempty"`
	ReportSocket      string                 `json:"reportSocket,omitempty"`
	ReadyMarker       string                 `json:"readyMarker,omitempty"`
	Meshes            map[string]mesh.Config `json:"-"`
	RawMeshes         json.RawMessage        `json:"meshes,omitempty"`
	RuntimeConfig     RuntimeConfig          `json:"runtimeConfig,omitempty"`
	// RawPrev shadows types.NetConf's prevResult map: decoding it straight
	// into the result type skips a generic decode and a re-encode.
	RawPrev json.RawMessage `json:"prevResult,omitempty"`

	// Filled in by Parse.
	Timeout time.Duration   `json:"-"`
	Result  *current.Result `json:"-"` // prevResult in the current version; nil when there is none
}

// RuntimeConfig holds the capability arguments the runtime inserts.
type RuntimeConfig struct {
	// PodAnnotations is nil when the runtime did not pass the capability,
	// and non-nil (possibly empty) when it did.
	PodAnnotations map[string]string `json:"io.kubernetes.cri.pod-annotations,omitempty"`
}

// K8sArgs is what Kubernetes runtimes put in CNI_ARGS.
type K8sArgs struct {
	types.CommonArgs
	K8S_POD_NAMESPACE          types.UnmarshallableString //nolint:revive,stylecheck // CNI_ARGS key
	K8S_POD_NAME               types.UnmarshallableString //nolint:revive,stylecheck
	K8S_POD_INFRA_CONTAINER_ID types.UnmarshallableString //nolint:revive,stylecheck
	K8S_POD_UID                types.UnmarshallableString //nolint:revive,stylecheck
}

// ParseArgs parses CNI_ARGS. Unknown keys are accepted only with
// IgnoreUnknown=1, as the runtimes send it.
func ParseArgs(s string) (*K8sArgs, error) {
	a := &K8sArgs{}
	if err := types.LoadArgs(s, a); err != nil {
		return nil, types.NewError(types.ErrInvalidEnvironmentVariables, "invalid CNI_ARGS", err.Error())
	}
	return a, nil
}

// Parse is the one parser of the chain entry: decode, parse prevResult,
// apply defaults, validate. Errors are *types.Error with the CNI code.
func Parse(stdin []byte) (*NetConf, error) {
	conf, err := ParseScoped(stdin)
	if err != nil {
		return nil, err
	}
	return conf, nil
}

// ParseScoped is Parse for the plugin's hot path. When the entry is invalid
// but still says which pods it exempts (Exempt) and what to pass through
// (prevResult), it returns the entry with its defaults together with the
// error, so one bad value does not fail pods the entry exempts. The keys
// that decide exemption are read leniently: a value of the wrong type
// takes the default, and a listed name that is not a namespace name
// matches no pod; either still fails every other pod with the error.
func ParseScoped(stdin []byte) (*NetConf, error) {
	conf := &NetConf{}
	var decErr error
	if err := json.Unmarshal(stdin, conf); err != nil {
		var te *json.UnmarshalTypeError
		if !errors.As(err, &te) || te.Field == "prevResult" || strings.HasPrefix(te.Field, "prevResult.") {
			return nil, types.NewError(types.ErrDecodingFailure, "failed to decode mesh-cni config", Clip(err.Error()))
		}
		// encoding/json decodes the rest and reports the first mistyped key.
		decErr = types.NewError(types.ErrDecodingFailure, "failed to decode mesh-cni config", Clip(err.Error()))
	}
	if len(conf.RawPrev) > 0 && string(conf.RawPrev) != "null" {
		// As version.ParsePrevResult: the result is read in the config's version.
		prev, err := create.Create(conf.CNIVersion, conf.RawPrev)
		if err != nil {
			return nil, types.NewError(types.ErrDecodingFailure, "failed to parse prevResult", err.Error())
		}
		conf.PrevResult = prev
	}
	if conf.PrevResult != nil {
		res, err := current.NewResultFromResult(conf.PrevResult)
		if err != nil {
			return nil, types.NewError(types.ErrDecodingFailure, "failed to convert prevResult", err.Error())
		}
		conf.Result = res
	}
	conf.setDefaults()
	if decErr != nil {
		return conf, decErr
	}
	meshes, err := parseMeshes(conf.RawMeshes)
	if err != nil {
		return conf, err
	}
	conf.Meshes = meshes
	if err := conf.validate(); err != nil {
		return conf, err
	}
	return conf, nil
}

// Exempt says why a pod is never redirected nor blocked: its namespace is
// excluded, or it is one of the node agent's own pods. "" means neither.
func (c *NetConf) Exempt(namespace, name string) string {
	if slices.Contains(c.ExcludeNamespaces, namespace) {
		return "excluded-namespace"
	}
	if namespace == c.AgentNamespace && strings.HasPrefix(name, c.AgentPodPrefix) {
		return "agent-pod"
	}
	return ""
}

func (c *NetConf) setDefaults() {
	if c.LogLevel == "" {
		c.LogLevel = DefaultLogLevel
	}
	c.LogLevel = strings.ToLower(c.LogLevel)
	if c.Backend == "" {
		c.Backend = DefaultBackend
	}
	if c.IPv6 == nil {
		t := true
		c.IPv6 = &t
	}
	if c.AgentNamespace == "" {
		c.AgentNamespace = DefaultAgentNamespace
	}
	if c.AgentPodPrefix == "" {
		c.AgentPodPrefix = DefaultAgentPodPrefix
	}
	// An explicit empty list means "exclude nothing"; only an absent key
	// takes the default.
	if c.ExcludeNamespaces == nil {
		c.ExcludeNamespaces = []string{"kube-system", c.AgentNamespace}
	}
	if c.Kubeconfig == "" {
		c.Kubeconfig = node.DefaultKubeconfig
	}
	if c.AgentSocket == "" {
		c.AgentSocket = node.DefaultAgentSocket
	}
	if c.ReportSocket == "" {
		c.ReportSocket = node.DefaultReportSocket
	}
	if c.ReadyMarker == "" {
		c.ReadyMarker = node.DefaultReadyMarker
	}
	c.Timeout = DefaultLookupTimeout
}

func (c *NetConf) validate() error {
	if !slices.Contains(Backends, c.Backend) {
		return invalid("backend", c.Backend, "want one of "+strings.Join(Backends, ", "))
	}
	if !slices.Contains(LogLevels, c.LogLevel) {
		return invalid("logLevel", c.LogLevel, "want one of "+strings.Join(LogLevels, ", "))
	}
	if c.LookupTimeout != "" {
		d, err := time.ParseDuration(c.LookupTimeout)
		if err != nil {
			return invalid("lookupTimeout", c.LookupTimeout, "not a duration such as \"5s\"")
		}
		if d <= 0 || d > MaxLookupTimeout {
			return invalid("lookupTimeout", c.LookupTimeout, "must be above 0 and at most "+MaxLookupTimeout.String())
		}
		c.Timeout = d
	}
	for key, p := range map[string]string{
		"kubeconfig": c.Kubeconfig, "agentSocket": c.AgentSocket,
		"reportSocket": c.ReportSocket, "readyMarker": c.ReadyMarker,
	} {
		if !filepath.IsAbs(p) {
			return invalid(key, p, "must be an absolute path")
		}
	}
	if !isDNSLabel(c.AgentNamespace) {
		return invalid("agentNamespace", c.AgentNamespace, "not a namespace name")
	}
	for _, ns := range c.ExcludeNamespaces {
		if !isDNSLabel(ns) {
			return invalid("excludeNamespaces", ns, "not a namespace name")
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Meshes)) {
		if err := mesh.Validate(name, c.Meshes[name]); err != nil {
			return types.NewError(types.ErrInvalidNetworkConfig, "invalid mesh config: "+Clip(err.Error()), "")
		}
	}
	return nil
}

// parseMeshes decodes "meshes" strictly: a profile name or a key we do not
// know is an error, not something to ignore. Profiles left out keep their
// defaults (linkerd and istio on, custom off).
func parseMeshes(raw json.RawMessage) (map[string]mesh.Config, error) {
	out := map[string]mesh.Config{}
	for _, name := range mesh.Profiles {
		out[name] = mesh.Config{}
	}
	if len(raw) == 0 || string(raw) == "null" {
		return out, nil
	}
	var byName map[string]json.RawMessage
	if err := json.Unmarshal(raw, &byName); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "failed to decode \"meshes\"", err.Error())
	}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		if _, known := out[name]; !known {
			return nil, types.NewError(types.ErrUnsupportedField,
				fmt.Sprintf("unknown mesh profile %q in \"meshes\"", Clip(name)),
				"known profiles: "+strings.Join(mesh.Profiles, ", "))
		}
		var mc mesh.Config
		dec := json.NewDecoder(bytes.NewReader(byName[name]))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&mc); err != nil {
			if strings.HasPrefix(err.Error(), "json: unknown field") {
				return nil, types.NewError(types.ErrUnsupportedField,
					fmt.Sprintf("meshes.%s: unsupported key %s", name, Clip(strings.TrimPrefix(err.Error(), "json: unknown field "))), "")
			}
			return nil, types.NewError(types.ErrDecodingFailure, fmt.Sprintf("failed to decode meshes.%s", name), err.Error())
		}
		if name == mesh.Custom && mc.Enabled == nil {
			// The custom profile has no defaults to run with; it is on
			// only when asked for.
			on := true
			mc.Enabled = &on
		}
		out[name] = mc
	}
	return out, nil
}

// invalid is the CNI error for a bad value: it names the key and the value.
func invalid(key, value, why string) *types.Error {
	return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("invalid %s %q: %s", key, Clip(value), why), "")
}

// MaxEcho is how much of a value an error message repeats.
const MaxEcho = 256

// Clip cuts s to MaxEcho bytes, marking the cut, so an error message never
// carries a whole oversized value into the runtime's log and events.
func Clip(s string) string {
	if len(s) <= MaxEcho {
		return s
	}
	cut := MaxEcho
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s...[%d bytes cut]", s[:cut], len(s)-cut)
}

func isDNSLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' {
			return false
		}
	}
	return true
}
