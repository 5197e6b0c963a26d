package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/mesh-cni/mesh-cni/internal/mesh"
	"github.com/mesh-cni/mesh-cni/internal/node"
)

// Settings are the chain entry's own keys: the ones the agent resolves and
// writes, and the plugin reads. Keys says, for each, its default, what it
// accepts and what it does.
type Settings struct {
	LogLevel          string   `json:"logLevel,omitempty"`
	Backend           string   `json:"backend,omitempty"`
	IPv6              *bool    `json:"ipv6,omitempty"`
	ExcludeNamespaces []string `json:"excludeNamespaces,omitzero"` // [] (exclude none) must survive encoding
	AgentNamespace    string   `json:"agentNamespace,omitempty"`
	AgentPodPrefix    string   `json:"agentPodPrefix,omitempty"`
	LookupTimeout     string   `json:"lookupTimeout,omitempty"`
	Kubeconfig        string   `json:"kubeconfig,omitempty"`
	AgentSocket       string   `json:"agentSocket,omitempty"`
	ReportSocket      string   `json:"reportSocket,omitempty"`
	ReadyMarker       string   `json:"readyMarker,omitempty"`
	// RawMeshes is "meshes" as written; Parse reads it strictly into
	// NetConf.Meshes.
	RawMeshes json.RawMessage `json:"meshes,omitempty"`
	// Resolved marks an entry the agent wrote: every key is filled in,
	// profiles included, so the plugin applies no default again.
	Resolved bool `json:"resolved,omitempty"`
}

// Key is one top-level key of the chain entry. Keys is the one place where
// a key's default, its check and its meaning are written: the plugin and
// the agent apply them, and `go generate ./internal/config` derives the chart's
// values.schema.json and docs/configuration.md from the table.
type Key struct {
	Name string
	// Default is the value an absent key takes, as JSON would carry it;
	// nil when it is derived (DefaultText says how).
	Default     any
	DefaultText string
	// Source is where the chart's entry takes the key from when it is
	// not the chart value of the same name (Schema is nil then).
	Source string
	// Schema is what the chart value of the same name accepts (null: the
	// key is left out, so its default applies).
	Schema map[string]any
	// Gap is what Schema cannot check; the agent refuses such an entry
	// with the plugin's error (see installer/README.md).
	Gap string
	Doc string

	check func(*NetConf) error
}

// Keys is the chain entry's key table, in the order the agent writes them.
var Keys = []Key{
	{
		Name: "type", Default: node.PluginType, Source: "always `mesh-cni`",
		Doc: "the plugin binary; the agent refuses an entry of another type",
	},
	{
		Name: "capabilities", Default: map[string]bool{AnnotationsCapability: true}, Source: "the default",
		Doc: "asks containerd and CRI-O to pass the pod's annotations in `runtimeConfig`, so ADD needs no API call",
	},
	{
		Name: "logLevel", Default: DefaultLogLevel,
		Schema: nullable(map[string]any{"type": "string", "pattern": "^(?i:" + strings.Join(LogLevels, "|") + ")$"}),
		Doc: "`" + strings.Join(LogLevels, "`, `") + "` (any case); JSON lines on stderr, which the runtime keeps in its log. " +
			"`info` logs one line per ADD and DEL. The chart passes it to the agent as well",
		check: func(c *NetConf) error {
			if !slices.Contains(LogLevels, c.LogLevel) {
				return invalid("logLevel", c.LogLevel, "want one of "+strings.Join(LogLevels, ", "))
			}
			return nil
		},
	},
	{
		Name: "backend", Default: DefaultBackend,
		Schema: nullable(map[string]any{"type": "string", "enum": Backends}),
		Doc: "`nftables` (netlink, in-process), `iptables-nft`, `iptables-legacy` (one `iptables-restore` per family, " +
			"per-netns lock), or `auto`: nftables when the kernel has it, else iptables-nft, else iptables-legacy. " +
			"A pinned iptables variant whose tools the host lacks falls back to nftables, and `auto` that cannot use " +
			"nftables uses iptables, each with a warning in the log and `mesh_cni_backend_fallbacks_total` on the agent",
		check: func(c *NetConf) error {
			if !slices.Contains(Backends, c.Backend) {
				return invalid("backend", c.Backend, "want one of "+strings.Join(Backends, ", "))
			}
			return nil
		},
	},
	{
		Name: "ipv6", Default: true,
		Schema: nullable(map[string]any{"type": "boolean"}),
		Doc: "program IPv6 for pods with an IPv6 address. When `false`, a meshed pod with an IPv6 address fails ADD " +
			"instead of leaving IPv6 unredirected",
	},
	{
		Name: "excludeNamespaces", Default: []string{DefaultExcludeNamespace},
		Schema: nullable(map[string]any{"type": "array", "items": map[string]any{
			"type": "string", "pattern": dnsLabelPattern, "maxLength": 63,
		}}),
		Doc: "pods here are never redirected nor blocked; `[]` excludes none. The agent's namespace is not excluded: " +
			"only the agent's own pods there are exempt (see `agentPodPrefix`). Read leniently, as it decides before anything else: a value that is not a list " +
			"takes the default, a name that is not a namespace name matches nothing (both still fail other pods)",
		check: func(c *NetConf) error {
			for _, ns := range c.ExcludeNamespaces {
				if !isDNSLabel(ns) {
					return invalid("excludeNamespaces", ns, "not a namespace name")
				}
			}
			return nil
		},
	},
	{
		Name: "agentNamespace", Default: DefaultAgentNamespace, Source: "the release namespace",
		Doc: "namespace of the node agent",
		check: func(c *NetConf) error {
			if !isDNSLabel(c.AgentNamespace) {
				return invalid("agentNamespace", c.AgentNamespace, "not a namespace name")
			}
			return nil
		},
	},
	{
		Name: "agentPodPrefix", Default: DefaultAgentPodPrefix, Source: "the release's full name and `-`",
		Doc: "the agent's own pods (in `agentNamespace`, name with this prefix) are never redirected nor blocked",
	},
	{
		Name: "lookupTimeout", Default: durText(DefaultLookupTimeout),
		Schema: nullable(map[string]any{"type": "string", "pattern": `^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`}),
		Gap:    "its size: above 0 and at most " + durText(MaxLookupTimeout),
		Doc: "total budget for looking a pod up when its annotations cannot decide (agent socket, at most half of it, " +
			"then one API GET); above 0 and at most `" + durText(MaxLookupTimeout) + "`",
		check: func(c *NetConf) error {
			d, err := time.ParseDuration(c.LookupTimeout)
			if err != nil {
				return invalid("lookupTimeout", c.LookupTimeout, "not a duration such as \"5s\"")
			}
			if d <= 0 || d > MaxLookupTimeout {
				return invalid("lookupTimeout", c.LookupTimeout, "must be above 0 and at most "+durText(MaxLookupTimeout))
			}
			c.Timeout = d
			return nil
		},
	},
	pathKey("agentSocket", node.DefaultAgentSocket, "`--host-run-dir`",
		"the agent's pod cache: `GET /v1/pods/{namespace}/{name}` over HTTP on a unix socket",
		func(c *NetConf) string { return c.AgentSocket }),
	pathKey("kubeconfig", node.DefaultKubeconfig, "`--host-state-dir`",
		"JSON kubeconfig the agent writes, for the one fallback GET of the pod",
		func(c *NetConf) string { return c.Kubeconfig }),
	pathKey("reportSocket", node.DefaultReportSocket, "`--host-run-dir`",
		"unixgram socket; one event per verb for the agent's metrics, with the verb's nf_tables sockets for the agent to close; dropped if nobody listens (one non-blocking send)",
		func(c *NetConf) string { return c.ReportSocket }),
	pathKey("readyMarker", node.DefaultReadyMarker, "`--host-run-dir`",
		"STATUS answers code 50 while this readiness marker is missing or invalid",
		func(c *NetConf) string { return c.ReadyMarker }),
	{
		Name: "meshes", DefaultText: "every profile with its defaults", Schema: meshesSchema(),
		Doc: "one object per mesh profile; omitted profiles and keys take the profile's defaults " +
			"([Mesh profiles](#mesh-profiles-meshesname))",
	},
	{
		Name: "resolved", Default: false, Source: "never: the agent writes it, and refuses a configured entry that sets it",
		Doc: "marks an entry the agent wrote with every key above filled in; the plugin then applies no default. " +
			"An entry without it (written by hand, or by an older agent) is resolved by the plugin on every call",
	},
}

// AnnotationsCapability is the runtime capability that passes the pod's
// annotations to the plugin.
const AnnotationsCapability = "io.kubernetes.cri.pod-annotations"

func pathKey(name, def, flag, doc string, get func(*NetConf) string) Key {
	return Key{
		Name: name, Default: def, Source: "the agent, from " + flag + " (whatever the configured entry says is replaced)",
		Doc: doc,
		check: func(c *NetConf) error {
			if p := get(c); !filepath.IsAbs(p) {
				return invalid(name, p, "must be an absolute path")
			}
			return nil
		},
	}
}

// durText writes a duration as a user would ("1m", not "1m0s").
func durText(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") || strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// nullable lets a chart value be null, or "" for a string: the key is left
// out of the entry, so its default applies (the plugin reads "" as unset
// too).
func nullable(s map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range s {
		out[k] = v
	}
	out["type"] = []any{s["type"], "null"}
	if e, ok := s["enum"].([]string); ok {
		var with []any
		for _, v := range e {
			with = append(with, v)
		}
		out["enum"] = append(with, "", nil)
	}
	if p, ok := s["pattern"].(string); ok {
		out["pattern"] = "^$|" + p
	}
	return out
}

const dnsLabelPattern = `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`

// HostPaths are the host paths the plugin must use, as the agent knows
// them from its flags. They replace whatever the configured entry says, so
// the chart cannot get them out of step with where the agent writes.
type HostPaths struct {
	Kubeconfig   string
	AgentSocket  string
	ReportSocket string
	ReadyMarker  string
}

// Resolve reads the chain entry as configured (the chart's plugin.json) as
// the agent does: strictly (a key the type does not know, a value of the
// wrong type, or another "type" is refused), then every default is applied
// once, profiles included, the host paths are filled in, and the result is
// checked with the plugin's own checks. Encode writes it.
func Resolve(raw []byte, hp HostPaths) (*NetConf, error) {
	if err := noDuplicateKeys(raw); err != nil {
		return nil, err
	}
	conf := &NetConf{}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(conf); err != nil {
		if k, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return nil, types.NewError(types.ErrUnsupportedField, "unsupported key "+Clip(k), "")
		}
		return nil, types.NewError(types.ErrDecodingFailure, "failed to decode mesh-cni config", Clip(err.Error()))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, types.NewError(types.ErrDecodingFailure, "failed to decode mesh-cni config", "data after the entry's object")
	}
	if conf.Type != node.PluginType {
		return nil, invalid("type", conf.Type, "want "+node.PluginType)
	}
	if conf.Resolved {
		return nil, invalid("resolved", "true", "the agent marks the entries it writes; a configured entry must not")
	}
	// Keys of the list or of one call, not of the entry.
	conf.NetConf = types.NetConf{Type: conf.Type, Capabilities: conf.Capabilities}
	conf.RuntimeConfig, conf.RawPrev = RuntimeConfig{}, nil
	if conf.Capabilities == nil {
		conf.Capabilities = map[string]bool{AnnotationsCapability: true}
	}
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&conf.Kubeconfig, hp.Kubeconfig)
	set(&conf.AgentSocket, hp.AgentSocket)
	set(&conf.ReportSocket, hp.ReportSocket)
	set(&conf.ReadyMarker, hp.ReadyMarker)
	conf.setDefaults()
	if err := conf.finish(); err != nil {
		return nil, err
	}
	conf.Resolved = true
	return conf, nil
}

// noDuplicateKeys refuses an object with a key twice, at any depth:
// encoding/json would keep the last one, and an entry written with two
// values for one key is ambiguous. Other syntax errors are left to the
// decoder, which names them.
func noDuplicateKeys(raw []byte) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	errSyntax := errors.New("syntax")
	var walk func(path string) error
	walk = func(path string) error {
		t, err := dec.Token()
		if err != nil {
			return errSyntax
		}
		switch t {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return errSyntax
				}
				key, _ := k.(string)
				if seen[key] {
					return types.NewError(types.ErrDecodingFailure, fmt.Sprintf("duplicate key %q", Clip(path+key)), "")
				}
				seen[key] = true
				if err := walk(path + key + "."); err != nil {
					return err
				}
			}
			if _, err := dec.Token(); err != nil {
				return errSyntax
			}
		case json.Delim('['):
			for dec.More() {
				if err := walk(path); err != nil {
					return err
				}
			}
			if _, err := dec.Token(); err != nil {
				return errSyntax
			}
		}
		return nil
	}
	if err := walk(""); err != nil && !errors.Is(err, errSyntax) {
		return err
	}
	return nil
}

// Encode writes a resolved entry as the agent chains it: compact JSON with
// every key of Keys, "meshes" with every profile and every field.
func (c *NetConf) Encode() ([]byte, error) {
	if !c.Resolved {
		return nil, errors.New("encode: the entry is not resolved")
	}
	out := struct {
		Type         string          `json:"type"`
		Capabilities map[string]bool `json:"capabilities,omitempty"`
		Settings
		Meshes map[string]mesh.Config `json:"meshes"` // shadows Settings.RawMeshes
	}{c.Type, c.Capabilities, c.Settings, c.Meshes}
	return json.Marshal(out)
}

// Load is the agent's reading of its configured entry: Resolve, then Encode.
func Load(raw []byte, hp HostPaths) ([]byte, error) {
	conf, err := Resolve(raw, hp)
	if err != nil {
		return nil, fmt.Errorf("plugin config: %w", err)
	}
	b, err := conf.Encode()
	if err != nil {
		return nil, fmt.Errorf("plugin config: %w", err)
	}
	return b, nil
}
