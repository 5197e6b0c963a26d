package install

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/mesh-cni/mesh-cni/internal/node"
)

// record lists every change we made to the conf dir, so uninstall undoes
// exactly those. It is written before the change it describes.
type record struct {
	Chained    []string          `json:"chained,omitempty"`   // conflists we appended to
	Converted  map[string]string `json:"converted,omitempty"` // our .conflist → the .conf it replaced
	Subdir     []string          `json:"subdir,omitempty"`    // files we dropped in network subdirs
	Standalone string            `json:"standalone,omitempty"`
	// Shim is the plugin binary placed under a taken-over plugin's name
	// (takeover.go), with its SHA-256: only that content is ours to
	// remove or replace.
	Shim *shim `json:"shim,omitempty"`
}

func (r *record) hasChained(base string) bool { return contains(r.Chained, base) }

func (r *record) addChained(base string) bool {
	if contains(r.Chained, base) {
		return false
	}
	r.Chained = append(r.Chained, base)
	sort.Strings(r.Chained)
	return true
}

func (in *Installer) recordPath() string { return filepath.Join(in.cfg.StateDir, "install.json") }
func (in *Installer) backupDir() string  { return filepath.Join(in.cfg.StateDir, "backup") }

func (in *Installer) loadRecord() (*record, error) {
	r := &record{Converted: map[string]string{}}
	b, err := os.ReadFile(in.recordPath())
	if errors.Is(err, os.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read install record: %w", err)
	}
	if err := json.Unmarshal(b, r); err != nil {
		// A record we cannot read must not stop chaining; uninstall then
		// falls back to stripping our entry from what it finds.
		in.log.Warn("install record unreadable, starting a new one", "path", in.recordPath(), "err", err)
		return &record{Converted: map[string]string{}}, nil
	}
	if r.Converted == nil {
		r.Converted = map[string]string{}
	}
	return r, nil
}

func (in *Installer) saveRecord(r *record) error {
	if err := os.MkdirAll(in.cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("create state dir: %w", err)
	}
	b, _ := json.MarshalIndent(r, "", "  ")
	if cur, err := os.ReadFile(in.recordPath()); err == nil && bytes.Equal(cur, b) {
		return nil
	}
	if err := WriteFileAtomic(in.recordPath(), b, 0o600); err != nil {
		return fmt.Errorf("write install record: %w", err)
	}
	return nil
}

// saveBackup keeps the primary's own content (without our entry) so
// uninstall can restore it.
func (in *Installer) saveBackup(base string, data []byte) error {
	if err := os.MkdirAll(in.backupDir(), 0o700); err != nil {
		return fmt.Errorf("create backup dir: %w", err)
	}
	p := filepath.Join(in.backupDir(), base)
	if cur, err := os.ReadFile(p); err == nil && bytes.Equal(cur, data) {
		return nil
	}
	if err := WriteFileAtomic(p, data, 0o600); err != nil {
		return fmt.Errorf("back up %s: %w", base, err)
	}
	return nil
}

func (in *Installer) readBackup(base string) ([]byte, error) {
	return os.ReadFile(filepath.Join(in.backupDir(), base))
}

// Uninstall removes our entry from every config we changed, restoring each
// primary as it was, and deletes our own files and the state kept for this.
// The binary is left to RemoveBinary, which must run after this.
func (in *Installer) Uninstall() error {
	rec, err := in.loadRecord()
	if err != nil {
		return err
	}
	var errs []error
	for list, conf := range rec.Converted {
		if err := in.unconvert(list, conf); err != nil {
			errs = append(errs, err)
		}
	}
	files := append([]string{}, rec.Chained...)
	// Entries the record does not know of (lost state dir): strip them
	// from the active primary too.
	if in.cfg.Chained {
		if p, _, err := FindPrimary(in.cfg.ConfDir, in.cfg.ConfFileName); err == nil && !contains(files, filepath.Base(p)) {
			files = append(files, filepath.Base(p))
		}
	}
	for _, base := range files {
		if _, conv := rec.Converted[base]; conv || filepath.Ext(base) != ".conflist" {
			continue
		}
		if err := in.unchain(base); err != nil {
			errs = append(errs, err)
		}
	}
	for _, rel := range rec.Subdir {
		p := filepath.Join(in.cfg.ConfDir, rel)
		if err := RemoveFileDurable(p); err != nil {
			errs = append(errs, err)
		}
		os.Remove(filepath.Dir(p)) // only if empty
	}
	if rec.Standalone != "" {
		if err := RemoveFileDurable(filepath.Join(in.cfg.ConfDir, rec.Standalone)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := in.removeShim(rec); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		// Keep the record and backups for the next attempt.
		return fmt.Errorf("uninstall: %w", errors.Join(errs...))
	}
	os.RemoveAll(in.backupDir())
	return RemoveFileDurable(in.recordPath())
}

func (in *Installer) unchain(base string) error {
	path := filepath.Join(in.cfg.ConfDir, base)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", base, err)
	}
	if _, err := rootObject(data); err != nil {
		return fmt.Errorf("%s is not valid JSON, leaving it alone: %w", base, err)
	}
	stripped, n, err := removePlugins(data, node.PluginType)
	if err != nil {
		return fmt.Errorf("%s: %w", base, err)
	}
	if n == 0 {
		return nil
	}
	if _, err := parseConfig(path, stripped); err != nil {
		return fmt.Errorf("%s without our entry would not load, leaving it alone: %w", base, err)
	}
	if err := WriteFileAtomic(path, stripped, 0o644); err != nil {
		return fmt.Errorf("restore %s: %w", base, err)
	}
	return nil
}

// unconvert brings back the .conf a conversion replaced and removes our
// .conflist, if it is still ours (the primary may have rewritten it).
func (in *Installer) unconvert(list, conf string) error {
	orig, err := in.readBackup(conf)
	if errors.Is(err, os.ErrNotExist) {
		// The state dir was lost: the .conf cannot come back byte for
		// byte, but the list minus our entry is the same network.
		in.log.Warn("no backup of a converted config; removing only our entry", "conf", conf, "list", list)
		return in.unchain(list)
	}
	if err != nil {
		return fmt.Errorf("backup of %s: %w", conf, err)
	}
	listPath := filepath.Join(in.cfg.ConfDir, list)
	confPath := filepath.Join(in.cfg.ConfDir, conf)
	cur, err := os.ReadFile(listPath)
	if errors.Is(err, os.ErrNotExist) {
		cur = nil
	} else if err != nil {
		return fmt.Errorf("read %s: %w", list, err)
	}
	if cur != nil {
		if _, err := rootObject(cur); err != nil {
			return fmt.Errorf("%s is not valid JSON, leaving it alone: %w", list, err)
		}
		stripped, _, err := removePlugins(cur, node.PluginType)
		if err != nil {
			return fmt.Errorf("%s: %w", list, err)
		}
		want, _ := convertConf(orig)
		if !bytes.Equal(stripped, want) {
			// Someone else owns the list now: only take our entry out.
			return in.unchain(list)
		}
	}
	if _, err := os.Stat(confPath); errors.Is(err, os.ErrNotExist) {
		if err := WriteFileAtomic(confPath, orig, 0o644); err != nil {
			return fmt.Errorf("restore %s: %w", conf, err)
		}
	}
	if cur != nil {
		return RemoveFileDurable(listPath)
	}
	return nil
}

// RemoveBinary deletes the plugin binary, then its helper. Call it after
// Uninstall, so no config names a missing plugin. The helper is removed
// even when HelperBinary is unset: it is ours either way.
func (in *Installer) RemoveBinary() error {
	if err := RemoveFileDurable(in.BinaryPath()); err != nil {
		return err
	}
	return RemoveFileDurable(in.HelperPath())
}
