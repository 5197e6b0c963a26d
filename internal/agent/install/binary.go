package install

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/mesh-cni/mesh-cni/internal/node"
)

// seen is an installed file's stamp and its source's, as last copied.
type seen struct{ dst, src fileStamp }

// fileStamp identifies a file's version without reading it.
type fileStamp struct {
	ino, size int64
	mtime     time.Time
	mode      os.FileMode
}

func stampOf(path string) (fileStamp, bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, false
	}
	st := fileStamp{size: fi.Size(), mtime: fi.ModTime(), mode: fi.Mode()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = int64(sys.Ino)
	}
	return st, true
}

// InstallBinary copies the helper, then the plugin, into the bin dir. It
// must succeed before any config names the plugin: CRI-O skips a list
// whose plugins are missing. The helper goes first so a new plugin never
// runs without it.
func (in *Installer) InstallBinary() (bool, error) {
	if fi, err := os.Stat(in.cfg.BinDir); err != nil {
		return false, fmt.Errorf("CNI bin dir: %w", err)
	} else if !fi.IsDir() {
		return false, fmt.Errorf("CNI bin dir %s is not a directory", in.cfg.BinDir)
	}
	var helperChanged bool
	if in.cfg.HelperBinary != "" {
		var err error
		if helperChanged, err = installFile(in.cfg.HelperBinary, in.HelperPath(), &in.helper); err != nil {
			return false, fmt.Errorf("install %s: %w", node.HelperBinary, err)
		}
	}
	changed, err := installFile(in.cfg.PluginBinary, in.BinaryPath(), &in.plugin)
	if err != nil {
		return helperChanged, fmt.Errorf("install plugin binary: %w", err)
	}
	return changed || helperChanged, nil
}

// installFile copies src to dst unless neither changed since last time.
func installFile(src, dst string, last *seen) (bool, error) {
	srcSt, srcOK := stampOf(src)
	if dstSt, ok := stampOf(dst); ok && srcOK && dstSt == last.dst && srcSt == last.src {
		return false, nil
	}
	changed, err := CopyFileAtomic(src, dst, 0o755)
	if err != nil {
		*last = seen{}
		return false, err
	}
	last.dst, _ = stampOf(dst)
	last.src = srcSt
	return changed, nil
}

// BinaryInstalled reports whether the bin dir holds the plugin (and the
// helper) we ship.
func (in *Installer) BinaryInstalled() error {
	if err := sameFile(in.cfg.PluginBinary, in.BinaryPath(), "plugin binary"); err != nil {
		return err
	}
	if in.cfg.HelperBinary != "" {
		return sameFile(in.cfg.HelperBinary, in.HelperPath(), node.HelperBinary)
	}
	return nil
}

func sameFile(src, dst, what string) error {
	want, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("read %s: %w", src, err)
	}
	got, err := os.ReadFile(dst)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !bytes.Equal(want, got) {
		return fmt.Errorf("%s %s differs from the one shipped", what, dst)
	}
	return nil
}
