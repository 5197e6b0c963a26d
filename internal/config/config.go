// Package config owns the mesh-cni chain entry, the plugin's network
// configuration: its type (Settings, and mesh.Config under "meshes"), each
// key's default, check and meaning (Keys, MeshKeys), the agent's reading of
// the configured entry (Resolve: every default applied once) and the
// plugin's reading of what the runtime passes on stdin (Parse). The chart's
// schema for these settings and docs/configuration.md are generated from
// the tables (go generate).
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/types/create"

	"github.com/mesh-cni/mesh-cni/internal/backend"
	"github.com/mesh-cni/mesh-cni/internal/echo"
	"github.com/mesh-cni/mesh-cni/internal/mesh"
	"github.com/mesh-cni/mesh-cni/internal/node"
)

// Defaults for the keys of the chain entry.
const (
	DefaultBackend        = backend.Auto
	DefaultLogLevel       = "info"
	DefaultAgentNamespace = "mesh-cni"
	DefaultAgentPodPrefix = "mesh-cni-"
	// DefaultExcludeNamespace is excluded when excludeNamespaces is
	// absent. The agent's namespace is not: its own pods are exempt by
	// name (agentPodPrefix), any other pod there is judged as everywhere.
	DefaultExcludeNamespace = "kube-system"
	DefaultLookupTimeout    = 5 * time.Second
	// MaxLookupTimeout keeps a pod's network setup bounded even when the
	// agent and the API server both hang.
	MaxLookupTimeout = time.Minute
)

// Backends are the accepted values of "backend".
var Backends = backend.Names

// LogLevels are the accepted values of "logLevel".
var LogLevels = []string{"debug", "info", "warn", "error"}

// NetConf is the chain entry as the runtime passes it: the CNI keys, the
// plugin's own Settings, and what the runtime adds at call time.
type NetConf struct {
	types.NetConf
	Settings

	RuntimeConfig RuntimeConfig `json:"runtimeConfig,omitempty"`
	// RawPrev shadows types.NetConf's prevResult map: decoding it straight
	// into the result type skips a generic decode and a re-encode.
	RawPrev json.RawMessage `json:"prevResult,omitempty"`

	// Filled in by Parse.
	Meshes  map[string]mesh.Config `json:"-"` // every known profile, with its defaults applied
	MeshSet *mesh.Set              `json:"-"` // the enabled meshes, resolved once for every pod
	Timeout time.Duration          `json:"-"`
	Result  *current.Result        `json:"-"` // prevResult in the current version; nil when there is none
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
	K8S_POD_NAME               types.UnmarshallableString //nolint:revive,stylecheck // CNI_ARGS key
	K8S_POD_INFRA_CONTAINER_ID types.UnmarshallableString //nolint:revive,stylecheck // CNI_ARGS key
	K8S_POD_UID                types.UnmarshallableString //nolint:revive,stylecheck // CNI_ARGS key
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
// apply defaults unless the entry is resolved, validate. Errors are
// *types.Error with the CNI code.
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
//
// An entry the agent wrote says "resolved": every default is in it, so
// none is applied again; it is only checked. An entry without the mark
// (written by hand, or chained by an older agent) is resolved here, on
// every call, exactly as the agent would.
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
	if !conf.Resolved || decErr != nil {
		conf.setDefaults()
	}
	if decErr != nil {
		return conf, decErr
	}
	if err := conf.finish(); err != nil {
		return conf, err
	}
	return conf, nil
}

// finish reads the meshes (resolving them unless the entry is resolved),
// validates every key and resolves the enabled meshes' Specs.
func (c *NetConf) finish() error {
	if c.Resolved {
		if err := c.complete(); err != nil {
			return err
		}
	}
	meshes, err := parseMeshes(c.RawMeshes, c.Resolved)
	if err != nil {
		return err
	}
	c.Meshes = meshes
	if err := c.validate(); err != nil {
		return err
	}
	set, err := mesh.NewSet(c.Meshes)
	if err != nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "invalid mesh config: "+Clip(err.Error()), "")
	}
	c.MeshSet = set
	return nil
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

// complete checks that a resolved entry has every key: nothing fills in
// a missing one (an unset agentPodPrefix would exempt every pod of the
// agent's namespace, an unset ipv6 would mean neither).
func (c *NetConf) complete() error {
	v := reflect.ValueOf(c.Settings)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
			return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("%q is missing from a resolved entry", name), "")
		}
	}
	return nil
}

// setDefaults applies the defaults of the top-level keys (Keys); the
// meshes take theirs in parseMeshes.
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
		c.ExcludeNamespaces = []string{DefaultExcludeNamespace}
	}
	if c.LookupTimeout == "" {
		c.LookupTimeout = durText(DefaultLookupTimeout)
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

// validate checks every top-level key against its Key's check.
func (c *NetConf) validate() error {
	for _, k := range Keys {
		if k.check == nil {
			continue
		}
		if err := k.check(c); err != nil {
			return err
		}
	}
	return nil
}

// parseMeshes decodes "meshes" strictly: a profile name or a key we do not
// know is an error, not something to ignore. In an entry as written,
// profiles left out keep their defaults (linkerd and istio on, custom off)
// and every omitted field takes its profile's default. In a resolved entry
// the settings are final; only a profile the entry does not name (one the
// agent that wrote it did not know) is given its defaults.
func parseMeshes(raw json.RawMessage, resolved bool) (map[string]mesh.Config, error) {
	decode := decodeMeshes
	if resolved {
		decode = decodeResolvedMeshes
	}
	given, err := decode(raw)
	if err != nil {
		return nil, err
	}
	out := make(map[string]mesh.Config, len(mesh.Profiles))
	for name, mc := range given {
		if resolved {
			out[name] = mc
			continue
		}
		if mc.Enabled == nil && mesh.OnWhenConfigured(name) {
			on := true
			mc.Enabled = &on
		}
		out[name] = mc.WithDefaults(name)
	}
	for _, name := range mesh.Profiles {
		if _, ok := out[name]; !ok {
			out[name] = mesh.Config{}.WithDefaults(name)
		}
	}
	return out, nil
}

// decodeMeshes decodes "meshes" in one pass when it is valid; otherwise it
// goes profile by profile, in name order, to say which profile or key is
// wrong.
func decodeMeshes(raw json.RawMessage) (map[string]mesh.Config, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var all map[string]mesh.Config
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if dec.Decode(&all) == nil && known(all) {
		return all, nil
	}
	return decodeByProfile(raw, true)
}

// decodeResolvedMeshes reads "meshes" of an entry the agent wrote. The
// agent checked it, and it may be of a newer release (the plugin binary and
// the entry change one after the other during an upgrade or a rollback):
// a key or a profile this plugin does not know is ignored, never refused
// (docs/upgrade.md, compatibility). A known key of the wrong type is still
// an error.
func decodeResolvedMeshes(raw json.RawMessage) (map[string]mesh.Config, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	return decodeByProfile(raw, false)
}

// decodeByProfile decodes "meshes" profile by profile, in name order, so an
// error names the profile. strict refuses a profile or key this plugin
// does not know; otherwise they are left out.
func decodeByProfile(raw json.RawMessage, strict bool) (map[string]mesh.Config, error) {
	var byName map[string]json.RawMessage
	if err := json.Unmarshal(raw, &byName); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "failed to decode \"meshes\"", err.Error())
	}
	out := map[string]mesh.Config{}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		switch {
		case slices.Contains(mesh.Profiles, name):
		case strict:
			return nil, types.NewError(types.ErrUnsupportedField,
				fmt.Sprintf("unknown mesh profile %q in \"meshes\"", Clip(name)),
				"known profiles: "+strings.Join(mesh.Profiles, ", "))
		default:
			continue
		}
		var mc mesh.Config
		dec := json.NewDecoder(bytes.NewReader(byName[name]))
		if strict {
			dec.DisallowUnknownFields()
		}
		if err := dec.Decode(&mc); err != nil {
			if strict && strings.HasPrefix(err.Error(), "json: unknown field") {
				return nil, types.NewError(types.ErrUnsupportedField,
					fmt.Sprintf("meshes.%s: unsupported key %s", name, Clip(strings.TrimPrefix(err.Error(), "json: unknown field "))), "")
			}
			return nil, types.NewError(types.ErrDecodingFailure, fmt.Sprintf("failed to decode meshes.%s", name), err.Error())
		}
		out[name] = mc
	}
	return out, nil
}

func known(meshes map[string]mesh.Config) bool {
	for name := range meshes {
		if !slices.Contains(mesh.Profiles, name) {
			return false
		}
	}
	return true
}

// invalid is the CNI error for a bad value: it names the key and the value.
func invalid(key, value, why string) *types.Error {
	return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("invalid %s %q: %s", key, Clip(value), why), "")
}

// MaxEcho is how much of a value an error message repeats (internal/echo).
const MaxEcho = echo.Max

// Clip cuts s to MaxEcho bytes, marking the cut (echo.Clip).
func Clip(s string) string { return echo.Clip(s) }

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
