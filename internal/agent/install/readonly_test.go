package install

import (
	"bytes"
	"strings"
	"syscall"
	"testing"
)

// A read-only bin dir (GKE's COS has /opt/cni/bin read-only): a clear
// error, nothing chained (no config may name a plugin that is not there),
// nothing deleted.
func TestReadOnlyBinDir(t *testing.T) {
	e := newEnv(t, nil)
	if err := syscall.Mount("tmpfs", e.bin, "tmpfs", syscall.MS_RDONLY, "size=1m"); err != nil {
		t.Fatalf("mount a read-only tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(e.bin, syscall.MNT_DETACH) })
	orig := fixture(t, "kindnet-ipv4.conflist")
	e.put(t, "10-kindnet.conflist", orig)
	before := snapshot(t, e.conf)
	st := e.in.pass()
	if st.Err == nil || st.Stage != "binary" || !strings.Contains(st.Err.Error(), "read-only file system") {
		t.Fatalf("want a read-only error from the binary stage, got %q (%s)", st.Err, st.Stage)
	}
	sameFiles(t, before, snapshot(t, e.conf))
	if !bytes.Equal(e.read(t, "10-kindnet.conflist"), orig) {
		t.Fatal("config chained without the binary")
	}
}
