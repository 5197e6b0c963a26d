package explain

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/mesh-cni/mesh-cni/internal/config"
	"github.com/mesh-cni/mesh-cni/internal/mesh"
)

// settings is what the chain entry contributes.
type settings struct {
	meshes      map[string]mesh.Config
	excludeNS   []string
	agentNS     string
	agentPrefix string
	ipv6        bool
}

func loadSettings(o Options) (settings, error) {
	s := settings{ipv6: true}
	switch {
	case o.ConfigPath != "" || (o.Profile == "" && len(o.Entry) > 0):
		var conf *config.NetConf
		var err error
		if o.ConfigPath != "" {
			conf, err = readChainEntry(o.ConfigPath)
		} else if conf, err = config.Parse(o.Entry); err != nil {
			err = fmt.Errorf("%s: %w", o.EntrySource, err)
		}
		if err != nil {
			return s, err
		}
		s.meshes, s.excludeNS = conf.Meshes, conf.ExcludeNamespaces
		s.agentNS, s.agentPrefix = conf.AgentNamespace, conf.AgentPodPrefix
		s.ipv6 = conf.IPv6 == nil || *conf.IPv6
	case o.Profile != "":
		if _, err := mesh.Defaults(o.Profile); err != nil {
			return s, err
		}
		var c mesh.Config
		if o.MeshConfig != "" {
			dec := json.NewDecoder(strings.NewReader(o.MeshConfig))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&c); err != nil {
				return s, fmt.Errorf("--mesh-config: %w", err)
			}
		}
		c.Enabled = ptr(true)
		s.meshes = map[string]mesh.Config{o.Profile: c}
	default:
		s.meshes = mesh.Sidecars()
	}
	for _, name := range sortedKeys(s.meshes) {
		if err := mesh.Validate(name, s.meshes[name]); err != nil {
			return s, err
		}
	}
	return s, nil
}

// readChainEntry reads the chain entry through internal/config, the plugin's own
// parser. A conflist is accepted too: its mesh-cni entry is used.
func readChainEntry(path string) (*config.NetConf, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var list struct {
		Plugins []json.RawMessage `json:"plugins"`
	}
	if json.Unmarshal(b, &list) == nil && list.Plugins != nil {
		b = nil
		for _, p := range list.Plugins {
			var t struct {
				Type string `json:"type"`
			}
			if json.Unmarshal(p, &t) == nil && t.Type == "mesh-cni" {
				b = p
			}
		}
		if b == nil {
			return nil, fmt.Errorf("%s: the conflist has no mesh-cni entry", path)
		}
	}
	conf, err := config.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return conf, nil
}

func (s settings) excluded(pod mesh.Pod) bool {
	if pod.Namespace == "" {
		return false
	}
	if slices.Contains(s.excludeNS, pod.Namespace) {
		return true
	}
	return s.agentNS != "" && pod.Namespace == s.agentNS && s.agentPrefix != "" && strings.HasPrefix(pod.Name, s.agentPrefix)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func ptr[T any](v T) *T { return &v }
