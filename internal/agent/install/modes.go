package install

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mesh-cni/mesh-cni/internal/node"
)

// standaloneName is our own list's file name in non-chained mode.
func (in *Installer) standaloneName() string {
	if in.cfg.ConfFileName != "" {
		return in.cfg.ConfFileName
	}
	return StandaloneName
}

func (in *Installer) reconcileStandalone() (Result, error) {
	name := in.standaloneName()
	path := filepath.Join(in.cfg.ConfDir, name)
	res := Result{Conf: path, Primary: path}
	out, err := standaloneList(in.cfg.Entry)
	if err != nil {
		return res, err
	}
	if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, out) {
		return res, nil
	}
	rec, err := in.loadRecord()
	if err != nil {
		return res, err
	}
	rec.Standalone = name
	if err := in.saveRecord(rec); err != nil {
		return res, err
	}
	if err := WriteFileAtomic(path, out, 0o644); err != nil {
		return res, err
	}
	res.Wrote = true
	return res, nil
}

func (in *Installer) reconcileSubdir(primary string, data []byte) (Result, error) {
	res := Result{Primary: primary}
	list, err := parseConfig(primary, data)
	if err != nil {
		return res, err
	}
	if list.LoadOnlyInlinedPlugins {
		return res, fmt.Errorf("primary config %s sets loadOnlyInlinedPlugins, so subdir chaining cannot work", filepath.Base(primary))
	}
	if list.Name == "" || strings.ContainsAny(list.Name, "/\\") || list.Name == "." || list.Name == ".." {
		return res, fmt.Errorf("primary network name %q cannot be a directory name", list.Name)
	}
	rec, err := in.loadRecord()
	if err != nil {
		return res, err
	}
	// An inline entry from an earlier chaining mode would run us twice.
	if n, _ := pluginsOfType(data, node.PluginType); len(n) > 0 {
		stripped, _, err := removePlugins(data, node.PluginType)
		if err != nil {
			return res, err
		}
		if err := WriteFileAtomic(primary, stripped, 0o644); err != nil {
			return res, err
		}
		res.Wrote = true
	}
	rel := filepath.Join(list.Name, node.PluginType+".conf")
	path := filepath.Join(in.cfg.ConfDir, rel)
	res.Conf = path
	var entry bytes.Buffer
	_ = json.Indent(&entry, in.cfg.Entry, "", "  ") // config.Load's JSON
	entry.WriteByte('\n')
	if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, entry.Bytes()) {
		return res, nil
	}
	if !contains(rec.Subdir, rel) {
		rec.Subdir = append(rec.Subdir, rel)
		if err := in.saveRecord(rec); err != nil {
			return res, err
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return res, fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	if err := WriteFileAtomic(path, entry.Bytes(), 0o644); err != nil {
		return res, err
	}
	res.Wrote = true
	return res, nil
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
