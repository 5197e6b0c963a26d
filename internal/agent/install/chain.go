package install

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mesh-cni/mesh-cni/internal/node"
)

// Reconcile makes the runtime's config name the plugin, changing nothing
// when it already does. It never touches a file other than the active
// primary config (or, in subdir mode, our own file next to it).
func (in *Installer) Reconcile() (Result, error) {
	if fi, err := os.Stat(in.cfg.ConfDir); err != nil {
		return Result{}, fmt.Errorf("CNI conf dir: %w", err)
	} else if !fi.IsDir() {
		return Result{}, fmt.Errorf("CNI conf dir %s is not a directory", in.cfg.ConfDir)
	}
	if !in.cfg.Chained {
		return in.reconcileStandalone()
	}
	found, cands, err := findPrimary(in.cfg.ConfDir, in.cfg.ConfFileName)
	primary, data := found.Path, found.data
	if settling(cands) {
		return Result{}, fmt.Errorf("%w: %s", ErrSettling, describeSkipped(cands))
	}
	if err != nil {
		if why := describeSkipped(cands); why != "" {
			return Result{}, fmt.Errorf("%w (skipped: %s)", err, why)
		}
		return Result{}, err
	}
	if primary, err = in.resolveLink(primary); err != nil {
		return Result{}, err
	}
	if p := in.cfg.Preflight; p != nil && p.PrimaryBinaries {
		if err := checkPrimaryBinaries(in.cfg.BinDir, primary, data); err != nil {
			return Result{Primary: primary}, err
		}
	}
	if !strings.HasSuffix(primary, ".conflist") {
		if in.cfg.Subdir {
			return Result{}, fmt.Errorf("subdir chaining needs a .conflist primary; %s is a single-plugin config (the runtime does not load subdir plugins for it)", filepath.Base(primary))
		}
		return in.convert(primary, data)
	}
	if err := checkHasPrimaryPlugin(data); err != nil {
		return Result{}, fmt.Errorf("primary config %s: %w; not chaining into it", filepath.Base(primary), err)
	}
	if in.cfg.Subdir {
		return in.reconcileSubdir(primary, data)
	}
	return in.appendTo(primary, data)
}

// resolveLink follows a symlinked primary to the file it names, so the
// edit goes there instead of replacing the link with a copy. A target
// outside the conf dir (an absolute host path that means something else in
// this container) is refused.
func (in *Installer) resolveLink(primary string) (string, error) {
	fi, err := os.Lstat(primary)
	if err != nil || fi.Mode()&os.ModeSymlink == 0 {
		return primary, nil //nolint:nilerr // not a link we can see: edit the path itself
	}
	target, err := filepath.EvalSymlinks(primary)
	if err != nil {
		return "", fmt.Errorf("primary config %s is a symlink that cannot be followed: %w", filepath.Base(primary), err)
	}
	dir, err := filepath.EvalSymlinks(in.cfg.ConfDir)
	if err != nil {
		return "", err
	}
	if filepath.Dir(target) != dir || filepath.Ext(target) != filepath.Ext(primary) {
		return "", fmt.Errorf("primary config %s is a symlink to %s; mesh-cni edits only files in the conf dir (set --conf-file-name to the file itself, or use --subdir-chaining)", filepath.Base(primary), target)
	}
	return filepath.Join(in.cfg.ConfDir, filepath.Base(target)), nil
}

// unchanged makes sure the primary still holds what we read, right before
// we replace it: a writer that rewrote it meanwhile must not lose its new
// content to our edit of the old one. The caller's next pass sees theirs.
func unchanged(path string, data []byte) error {
	cur, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrSettling, filepath.Base(path), err) //nolint:errorlint // the second error is context, not a cause to match
	}
	if !bytes.Equal(cur, data) {
		return fmt.Errorf("%w: %s changed while being chained", ErrSettling, filepath.Base(path))
	}
	return nil
}

// settling is true when an invalid file that would come before the
// primary was modified moments ago: likely a writer mid-way through a
// non-atomic write.
func settling(cands []Candidate) bool {
	for _, c := range cands {
		if c.Err == nil {
			return false
		}
		if fi, err := os.Stat(c.Path); err == nil && time.Since(fi.ModTime()) < settleTime {
			return true
		}
	}
	return false
}

// checkHasPrimaryPlugin refuses a list that has no interface plugin left
// (only chained plugins): chaining into it cannot give pods a network.
func checkHasPrimaryPlugin(data []byte) error {
	types, err := pluginTypes(data)
	if err != nil {
		return err
	}
	for _, t := range types {
		if !chainOnlyTypes[t] {
			return nil
		}
	}
	return fmt.Errorf("its plugin list %v has no primary (interface) plugin, only chained ones", types)
}

func (in *Installer) hasOurEntry(data []byte) (bool, error) {
	ours, err := pluginsOfType(data, node.PluginType)
	if err != nil {
		return false, err
	}
	return len(ours) == 1 && jsonEqual(ours[0], in.cfg.Entry), nil
}

func (in *Installer) appendTo(primary string, data []byte) (Result, error) {
	res := Result{Conf: primary, Primary: primary, Others: otherMeshes(data, in.cfg.MigrateFrom)}
	if done, err := in.handBack(primary, data, &res); done || err != nil {
		res.Others = otherMeshes(data, in.cfg.HandBackTo)
		return res, err
	}
	ok, err := in.hasOurEntry(data)
	if err != nil {
		return res, err
	}
	theirs := 0
	if in.cfg.MigrateFrom != "" {
		n, _ := pluginsOfType(data, in.cfg.MigrateFrom)
		theirs = len(n)
	}
	if ok && theirs == 0 {
		return res, nil
	}
	stripped, removed, err := removePlugins(data, node.PluginType)
	if err != nil {
		return res, err
	}
	if theirs > 0 {
		// Theirs out and ours in, in the one write below: no pod starts
		// with both plugins or with neither.
		if stripped, res.Replaced, err = removePlugins(stripped, in.cfg.MigrateFrom); err != nil {
			return res, err
		}
	}
	out, err := appendPlugin(stripped, in.cfg.Entry)
	if err != nil {
		return res, err
	}
	if _, err := parseConfig(primary, out); err != nil {
		return res, fmt.Errorf("chained config would not load (left %s alone): %w", filepath.Base(primary), err)
	}
	rec, err := in.loadRecord()
	if err != nil {
		return res, err
	}
	base := filepath.Base(primary)
	res.Rechained = removed == 0 && rec.hasChained(base)
	if err := in.saveBackup(base, stripped); err != nil {
		return res, err
	}
	if rec.addChained(base) {
		if err := in.saveRecord(rec); err != nil {
			return res, err
		}
	}
	if err := unchanged(primary, data); err != nil {
		return res, err
	}
	if err := WriteFileAtomic(primary, out, 0o644); err != nil {
		return res, fmt.Errorf("write chained config: %w", err)
	}
	res.Wrote = true
	return res, nil
}

// convert turns a single-plugin .conf (or .json) primary into a .conflist
// with our entry. The new file is durable before the old one goes, so a
// crash in between leaves a loadable config either way.
func (in *Installer) convert(primary string, data []byte) (Result, error) {
	target := strings.TrimSuffix(primary, filepath.Ext(primary)) + ".conflist"
	res := Result{Conf: target, Primary: primary, Converted: true}
	if existing, err := os.ReadFile(target); err == nil {
		if n, _ := pluginsOfType(existing, node.PluginType); len(n) == 0 {
			return res, fmt.Errorf("cannot convert %s: %s exists and was not written by mesh-cni", filepath.Base(primary), filepath.Base(target))
		}
	}
	list, err := convertConf(data)
	if err != nil {
		return res, fmt.Errorf("convert %s: %w", filepath.Base(primary), err)
	}
	if err := checkHasPrimaryPlugin(list); err != nil {
		return res, fmt.Errorf("primary config %s: %w; not chaining into it", filepath.Base(primary), err)
	}
	out, err := appendPlugin(list, in.cfg.Entry)
	if err != nil {
		return res, err
	}
	if _, err := parseConfig(target, out); err != nil {
		return res, fmt.Errorf("converted config would not load (left %s alone): %w", filepath.Base(primary), err)
	}
	rec, err := in.loadRecord()
	if err != nil {
		return res, err
	}
	if err := in.saveBackup(filepath.Base(primary), data); err != nil {
		return res, err
	}
	rec.Converted[filepath.Base(target)] = filepath.Base(primary)
	if err := in.saveRecord(rec); err != nil {
		return res, err
	}
	mode := os.FileMode(0o644)
	if fi, err := os.Stat(primary); err == nil {
		mode = fi.Mode().Perm()
	}
	if err := unchanged(primary, data); err != nil {
		return res, err
	}
	if err := WriteFileAtomic(target, out, mode); err != nil {
		return res, fmt.Errorf("write converted config: %w", err)
	}
	if err := RemoveFileDurable(primary); err != nil {
		return res, err
	}
	res.Wrote = true
	return res, nil
}
