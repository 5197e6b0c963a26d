package install

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mesh-cni/mesh-cni/internal/node"
)

// State is reported after every pass of the watch loop.
type State struct {
	Result
	BinaryChanged bool
	Stage         string // where Err came from: "binary" or "config"
	Err           error  // nil: binary and config are in place
	// Kept is, after a refused pass (ErrRefused), the file that still
	// holds an entry of ours from an earlier pass ("" if none): the
	// runtime keeps running it, so ADD keeps working.
	Kept     string
	Watching bool
	// Fight is set, at most once a FightWindow, when re-chains come so
	// often that another component keeps removing our entry: what the
	// operator should look at.
	Fight string
	// Entry is the chain entry this pass put in force (nil when Err is
	// set): what the runtime hands the plugin, published on the Node so
	// the CLI can show what ADD does there.
	Entry []byte
	// Takeover is the progress of Config.MigrateFrom (From "" when off).
	Takeover Takeover
}

// pass installs the binary, then the config, in that order.
func (in *Installer) pass() State {
	st := in.install()
	if errors.Is(st.Err, ErrRefused) {
		st.Kept = in.keptEntry()
	}
	return st
}

func (in *Installer) install() State {
	var st State
	if err := in.loadEntry(); err != nil {
		st.Err, st.Stage = err, "entry"
		return st
	}
	changed, err := in.InstallBinary()
	st.BinaryChanged = changed
	if err != nil {
		st.Err, st.Stage = err, "binary"
		return st
	}
	st.Result, st.Err = in.Reconcile()
	st.Stage = "config"
	if st.Err == nil {
		st.Entry = in.cfg.Entry
		if err := in.ensureShim(); err != nil {
			in.log.Warn("cannot place the DEL-only binary for the taken-over plugin", "from", in.cfg.MigrateFrom, "err", err)
		}
	}
	return st
}

// keptEntry names the file whose entry of ours the runtime still runs:
// the primary list holding exactly one mesh-cni plugin, or our own list in
// standalone mode. Subdir mode is not looked into ("").
func (in *Installer) keptEntry() string {
	if in.cfg.Subdir {
		return ""
	}
	if !in.cfg.Chained {
		path := filepath.Join(in.cfg.ConfDir, in.standaloneName())
		if data, err := os.ReadFile(path); err == nil {
			if ours, err := pluginsOfType(data, node.PluginType); err == nil && len(ours) == 1 {
				return path
			}
		}
		return ""
	}
	found, _, err := findPrimary(in.cfg.ConfDir, in.cfg.ConfFileName)
	if err != nil {
		return ""
	}
	if ours, err := pluginsOfType(found.data, node.PluginType); err == nil && len(ours) == 1 {
		return found.Path
	}
	return ""
}

// loadEntry refreshes the entry and checks the backend's tools; on error
// nothing is touched, so the entry chained last stays in place.
func (in *Installer) loadEntry() error {
	if in.cfg.LoadEntry != nil {
		e, err := in.cfg.LoadEntry()
		if err != nil {
			return fmt.Errorf("%w: %w (fix the plugin settings; the chain keeps its previous entry)", ErrRefused, err)
		}
		in.cfg.Entry = e
	}
	if p := in.cfg.Preflight; p != nil {
		name := EntryBackend(in.cfg.Entry)
		if err := p.checkTools(name, BackendTools(name)); err != nil {
			return err
		}
	}
	return nil
}
