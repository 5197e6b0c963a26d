package install

import (
	"fmt"
	"path/filepath"
	"slices"

	"github.com/mesh-cni/mesh-cni/internal/node"
)

// checkHandBackTo accepts "" or one of MigrateSources, in inline chaining
// only, and not together with MigrateFrom (one takes the other's entry
// out, the other takes ours out: both at once would fight).
func checkHandBackTo(cfg Config) error {
	if cfg.HandBackTo == "" {
		return nil
	}
	if !slices.Contains(MigrateSources, cfg.HandBackTo) {
		return fmt.Errorf("hand back to %q: must be one of %v", cfg.HandBackTo, MigrateSources)
	}
	if cfg.MigrateFrom != "" {
		return fmt.Errorf("hand back to %s and migrate from %s at once: set one", cfg.HandBackTo, cfg.MigrateFrom)
	}
	if !cfg.Chained || cfg.Subdir {
		return fmt.Errorf("hand back to %s needs inline chaining (chained, not subdir): its entry and ours live in the primary's one list", cfg.HandBackTo)
	}
	return nil
}

// handBack takes our entry out of a primary that holds an entry of
// Config.HandBackTo, in one write that leaves theirs: a pod sandbox is set
// up by both plugins only between their installer's write and this one,
// and never by neither. It reports false when the primary holds no such
// entry (the caller chains ours as usual, so pods are redirected until the
// other plugin is back).
func (in *Installer) handBack(primary string, data []byte, res *Result) (bool, error) {
	if in.cfg.HandBackTo == "" {
		return false, nil
	}
	theirs, err := pluginsOfType(data, in.cfg.HandBackTo)
	if err != nil {
		return false, fmt.Errorf("primary config %s: %w", filepath.Base(primary), err)
	}
	if len(theirs) == 0 {
		return false, nil
	}
	res.HandedBack = in.cfg.HandBackTo
	stripped, removed, err := removePlugins(data, node.PluginType)
	if err != nil {
		return true, err
	}
	if removed == 0 {
		return true, nil
	}
	if _, err := parseConfig(primary, stripped); err != nil {
		return true, fmt.Errorf("config without our entry would not load (left %s alone): %w", filepath.Base(primary), err)
	}
	if err := unchanged(primary, data); err != nil {
		return true, err
	}
	if err := WriteFileAtomic(primary, stripped, 0o644); err != nil {
		return true, fmt.Errorf("write config without our entry: %w", err)
	}
	res.Wrote = true
	in.log.Info("handed the node back: took our entry out, the other plugin's stays", "plugin", in.cfg.HandBackTo, "conf", filepath.Base(primary))
	return true, nil
}
