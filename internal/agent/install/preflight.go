package install

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mesh-cni/mesh-cni/internal/backend"
	"github.com/mesh-cni/mesh-cni/internal/node"
)

// ErrRefused means the agent will not chain: the entry does not validate
// or the node cannot run it. The chain is left as it was, so an earlier
// good entry keeps working.
var ErrRefused = errors.New("refusing to chain")

// Preflight is what the node must offer before the entry is chained.
type Preflight struct {
	// PrimaryBinaries: the bin dir must hold the primary's own plugins;
	// when it does not, it is not the dir the runtime uses.
	PrimaryBinaries bool
	// Tools are the host binaries the configured backend runs, and
	// ToolDirs where the plugin searches for them, as the agent sees them
	// (a read-only mount of the host's directories).
	Tools    []string
	ToolDirs []string
}

// BackendTools lists the host binaries a backend needs, as the iptables
// backend looks them up (internal/backend/iptables New: restore and save for
// both families). auto and nftables need none: they speak netlink.
func BackendTools(name string) []string {
	var v string
	switch name {
	case backend.IptablesNFT:
		v = "nft"
	case backend.IptablesLegacy:
		v = "legacy"
	default:
		return nil
	}
	var out []string
	for _, p := range []string{"iptables", "ip6tables"} {
		out = append(out, p+"-"+v+"-restore", p+"-"+v+"-save")
	}
	return out
}

// checkTools names the tools found in none of the dirs.
func (p *Preflight) checkTools(backendName string, tools []string) error {
	if len(p.ToolDirs) == 0 {
		return nil
	}
	var missing []string
	for _, t := range tools {
		found := false
		for _, d := range p.ToolDirs {
			if st, err := os.Stat(filepath.Join(d, t)); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
				found = true
				break
			}
		}
		if !found {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: backend %q needs %s, missing on this host (searched %s); install them or set backend to auto or nftables",
			ErrRefused, backendName, strings.Join(missing, ", "), strings.Join(p.ToolDirs, ", "))
	}
	return nil
}

// checkPrimaryBinaries names the primary's plugins (and their IPAM
// plugins) that are not in binDir.
func checkPrimaryBinaries(binDir, primary string, data []byte) error {
	var missing []string
	for _, t := range PluginBinaries(data) {
		if t == node.PluginType {
			continue
		}
		if _, err := os.Stat(filepath.Join(binDir, t)); err != nil {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: CNI bin dir %s lacks %s, which the primary config %s runs: it is not the bin dir the runtime uses (set cni.binDir to the runtime's bin dir)",
			ErrRefused, binDir, strings.Join(missing, ", "), filepath.Base(primary))
	}
	return nil
}

// PluginBinaries lists the plugin and IPAM types of a conflist or a single
// plugin config, in order, without repeats: the files the runtime runs from
// its bin dir.
func PluginBinaries(data []byte) []string {
	type plugin struct {
		Type string `json:"type"`
		IPAM struct {
			Type string `json:"type"`
		} `json:"ipam"`
	}
	var doc struct {
		plugin
		Plugins []plugin `json:"plugins"`
	}
	if json.Unmarshal(data, &doc) != nil {
		return nil
	}
	ps := doc.Plugins
	if ps == nil {
		ps = []plugin{doc.plugin}
	}
	var out []string
	for _, p := range ps {
		for _, t := range []string{p.Type, p.IPAM.Type} {
			// A type is a file name in the bin dir; anything else is for
			// the runtime to reject.
			if t != "" && !strings.ContainsAny(t, "/\\") && !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
	}
	return out
}
