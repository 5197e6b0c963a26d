package install

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// tmpPrefix marks our temp files: dot-prefixed and without a config
// extension, so runtimes and our own watcher ignore them.
const tmpPrefix = ".mesh-cni-tmp-"

// disk holds the calls that make a write durable. Only tests swap them, to
// see that they come in the order a crash needs: write, fsync the file,
// rename it into place, fsync the dir.
var disk = struct {
	write   func(f *os.File, b []byte) (int, error)
	sync    func(f *os.File) error
	rename  func(from, to string) error
	syncDir func(dir string) error
}{(*os.File).Write, (*os.File).Sync, os.Rename, syncDir}

// WriteFileAtomic replaces path with data so that a reader, or a reboot at
// any instant, sees either the old or the new content in full: temp file in
// the same dir, fsync, rename, fsync the dir. When path exists its mode and
// owner are kept.
func WriteFileAtomic(path string, data []byte, mode os.FileMode) error {
	return writeAtomic(path, data, mode, true)
}

// WriteFileAtomicMode is WriteFileAtomic with mode always applied, for
// files we own (kubeconfig) whose mode must not be inherited.
func WriteFileAtomicMode(path string, data []byte, mode os.FileMode) error {
	return writeAtomic(path, data, mode, false)
}

func writeAtomic(path string, data []byte, mode os.FileMode, keep bool) error {
	dir := filepath.Dir(path)
	uid, gid := -1, -1
	if fi, err := os.Stat(path); err == nil && keep {
		mode = fi.Mode().Perm()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			uid, gid = int(st.Uid), int(st.Gid)
		}
	}
	tmp, err := os.CreateTemp(dir, tmpPrefix+"*")
	if err != nil {
		return fmt.Errorf("create temp file in %s: %w", dir, err)
	}
	name := tmp.Name()
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(name)
		}
	}()
	if _, err := disk.write(tmp, data); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		return fmt.Errorf("chmod %s: %w", name, err)
	}
	if uid >= 0 {
		_ = tmp.Chown(uid, gid) // best effort: keep the writer's owner
	}
	if err := disk.sync(tmp); err != nil {
		return fmt.Errorf("fsync %s: %w", name, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", name, err)
	}
	if err := disk.rename(name, path); err != nil {
		return fmt.Errorf("rename %s to %s: %w", name, path, err)
	}
	ok = true
	return disk.syncDir(dir)
}

// CopyFileAtomic installs src at dst the same way. It does nothing when dst
// already has the same content, so a running binary is not replaced
// needlessly.
func CopyFileAtomic(src, dst string, mode os.FileMode) (changed bool, err error) {
	data, err := os.ReadFile(src)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", src, err)
	}
	if cur, err := os.ReadFile(dst); err == nil && bytes.Equal(cur, data) {
		if fi, err := os.Stat(dst); err == nil && fi.Mode().Perm() == mode {
			return false, nil
		}
	}
	removeStaleTemps(filepath.Dir(dst))
	// The binary gets a fresh mode, not the old file's.
	tmp, err := os.CreateTemp(filepath.Dir(dst), tmpPrefix+"*")
	if err != nil {
		return false, fmt.Errorf("create temp file in %s: %w", filepath.Dir(dst), err)
	}
	name := tmp.Name()
	fail := func(err error) (bool, error) {
		tmp.Close()
		os.Remove(name)
		return false, err
	}
	if _, err := disk.write(tmp, data); err != nil {
		return fail(fmt.Errorf("write %s: %w", name, err))
	}
	if err := tmp.Chmod(mode); err != nil {
		return fail(fmt.Errorf("chmod %s: %w", name, err))
	}
	if err := disk.sync(tmp); err != nil {
		return fail(fmt.Errorf("fsync %s: %w", name, err))
	}
	if err := tmp.Close(); err != nil {
		return fail(fmt.Errorf("close %s: %w", name, err))
	}
	if err := disk.rename(name, dst); err != nil {
		os.Remove(name)
		return false, fmt.Errorf("rename %s to %s: %w", name, dst, err)
	}
	return true, disk.syncDir(filepath.Dir(dst))
}

// RemoveFileDurable removes path (no error if it is gone) and syncs its dir.
func RemoveFileDurable(path string) error {
	if err := os.Remove(path); err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return disk.syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	return nil
}

// removeStaleTemps deletes temp files a killed agent left behind.
func removeStaleTemps(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}
