package install

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// recordDisk swaps the disk calls for ones that log each call (and then
// make it) until the test ends. before, if set, runs ahead of each write.
func recordDisk(t *testing.T, before func(f *os.File)) *[]string {
	t.Helper()
	saved := disk
	t.Cleanup(func() { disk = saved })
	var ops []string
	disk.write = func(f *os.File, b []byte) (int, error) {
		if before != nil {
			before(f)
		}
		ops = append(ops, "write "+f.Name())
		return saved.write(f, b)
	}
	disk.sync = func(f *os.File) error {
		ops = append(ops, "fsync "+f.Name())
		return saved.sync(f)
	}
	disk.rename = func(from, to string) error {
		ops = append(ops, "rename "+from+" "+to)
		return saved.rename(from, to)
	}
	disk.syncDir = func(dir string) error {
		ops = append(ops, "fsyncdir "+dir)
		return saved.syncDir(dir)
	}
	return &ops
}

// A reboot right after a rename must find the new content in full (not a
// zero-byte file, as runtimes have hit after power loss) and the rename
// itself: write, fsync the temp file, rename it, fsync the dir.
func TestWriteDurableOrder(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		write func(path string) error
	}{
		{"WriteFileAtomic", func(p string) error { return WriteFileAtomic(p, []byte("{}"), 0o644) }},
		{"WriteFileAtomicMode", func(p string) error { return WriteFileAtomicMode(p, []byte("{}"), 0o600) }},
		{"CopyFileAtomic", func(p string) error { _, err := CopyFileAtomic(src, p, 0o755); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ops := recordDisk(t, nil)
			path := filepath.Join(dir, tc.name)
			if err := tc.write(path); err != nil {
				t.Fatal(err)
			}
			if len(*ops) == 0 {
				t.Fatal("no disk calls recorded")
			}
			tmp := strings.TrimPrefix((*ops)[0], "write ")
			want := []string{"write " + tmp, "fsync " + tmp, "rename " + tmp + " " + path, "fsyncdir " + dir}
			if fmt.Sprint(*ops) != fmt.Sprint(want) {
				t.Errorf("disk calls:\n got %q\nwant %q", *ops, want)
			}
		})
	}
}

// The same through a whole pass of the installer: every file renamed into
// place was fsync'd after its last write, and its dir is fsync'd after the
// rename before anything else is written.
func TestReconcileWritesDurably(t *testing.T) {
	for _, f := range []string{"kindnet-ipv4.conflist", "flannel-legacy-v0.9.1.conf"} {
		t.Run(f, func(t *testing.T) {
			e := newEnv(t, nil)
			e.put(t, "10-"+f, fixture(t, f))
			ops := recordDisk(t, nil)
			if _, err := e.in.InstallBinary(); err != nil {
				t.Fatal(err)
			}
			res, err := e.in.Reconcile()
			if err != nil {
				t.Fatal(err)
			}
			if !res.Wrote {
				t.Fatal("nothing written")
			}
			checkDurable(t, *ops)
			renamedConf := false
			for _, op := range *ops {
				renamedConf = renamedConf || strings.HasSuffix(op, " "+res.Conf)
			}
			if !renamedConf {
				t.Errorf("%s not renamed into place: %q", res.Conf, *ops)
			}
		})
	}
}

func checkDurable(t *testing.T, ops []string) {
	t.Helper()
	synced := map[string]bool{}
	pending := "" // dir of the last rename, until fsync'd
	for i, op := range ops {
		verb, arg, _ := strings.Cut(op, " ")
		switch verb {
		case "write":
			synced[arg] = false
		case "fsync":
			synced[arg] = true
		case "fsyncdir":
			if arg == pending {
				pending = ""
			}
		}
		if pending != "" && verb != "fsyncdir" {
			t.Errorf("call %d %q: dir %s not fsync'd after the rename before it", i, op, pending)
			return
		}
		if verb == "rename" {
			from, to, _ := strings.Cut(arg, " ")
			if !synced[from] {
				t.Errorf("call %d %q: %s renamed without an fsync after its last write", i, op, from)
				return
			}
			pending = filepath.Dir(to)
		}
	}
	if pending != "" {
		t.Errorf("dir %s not fsync'd after the last rename", pending)
	}
}

// The primary's daemon rewrites its config between our read and our
// write. Our edit of the old content must not replace theirs: the pass
// gives up (ErrSettling), the loop retries and chains into the new bytes.
func TestPrimaryRewrittenMidPass(t *testing.T) {
	for _, tc := range []struct {
		name, file, old, newer string
	}{
		{"conflist", "10-calico.conflist", "calico-manifest-portmap-bandwidth.conflist", "calico-manifest-cni1.0.0.conflist"},
		{"conf", "10-bridge.conf", "kthw-bridge-cni1.0.0.conf", "crio-legacy-bridge.conf"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			primary := e.put(t, tc.file, fixture(t, tc.old))
			newer := fixture(t, tc.newer)
			// Our first write after the read is the backup in the
			// state dir: the primary changes right then, once.
			var fired atomic.Bool
			recordDisk(t, func(f *os.File) {
				if filepath.Dir(f.Name()) == e.state && fired.CompareAndSwap(false, true) {
					writeLikePrimary(t, primary, newer, false)
				}
			})
			ch, stop := runWatch(t, e)
			defer stop()
			s := waitState(t, ch, func(s State) bool { return s.Stage == "config" })
			if !errors.Is(s.Err, ErrSettling) {
				t.Errorf("first pass: want ErrSettling, got %v (conf %s)", s.Err, s.Conf)
			}
			if s.Err != nil {
				s = waitState(t, ch, func(s State) bool { return s.Err == nil })
			}
			stop()
			want := newer
			if tc.name == "conf" {
				if _, err := os.Stat(primary); !os.IsNotExist(err) {
					t.Errorf("%s still there after conversion: %v", primary, err)
				}
				var err error
				if want, err = convertConf(newer); err != nil {
					t.Fatal(err)
				}
			}
			want, err := appendPlugin(want, e.in.cfg.Entry)
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(s.Conf)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("the primary's rewrite was lost; %s:\n%s\nwant:\n%s", s.Conf, got, want)
			}
			loadChained(t, s.Conf)
		})
	}
}
