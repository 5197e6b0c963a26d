// Package podrules answers, read-only, whether a pod's network namespace
// holds the rules ADD writes for it. The agent serves it on its pod-rules
// listener (finding.Path); mesh-cnictl reaches it through the API
// server's pods/proxy ("explain --check").
package podrules

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/mesh-cni/mesh-cni/internal/backend/policy"
)

// MaxNetns bounds the files FindNetns looks at: far above any node's pod
// limit (110 by default, a few hundred at most), so a dir holding more is
// not a runtime's netns dir.
const MaxNetns = 4096

// errNotFound: no netns in the dir holds the pod's addresses.
var errNotFound = errors.New("no network namespace holds the pod's IPs")

// FindNetns returns the netns file in dir (the runtime's netns dir, e.g.
// /var/run/netns) one of whose interfaces holds any of ips, and how many
// files it looked at. It only opens files and dumps addresses: each
// candidate must be an nsfs mount (a bind-mounted netns), and the dump
// runs on a netlink socket created in that netns, so this process's
// threads never enter it.
func FindNetns(ctx context.Context, dir string, ips []netip.Addr) (string, int, error) {
	if len(ips) == 0 {
		return "", 0, errors.New("the pod has no IP")
	}
	d, err := os.Open(dir)
	if err != nil {
		return "", 0, fmt.Errorf("netns dir: %w", err)
	}
	defer d.Close()
	ents, err := d.ReadDir(MaxNetns + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", 0, fmt.Errorf("read netns dir %s: %w", dir, err)
	}
	if len(ents) > MaxNetns {
		return "", 0, fmt.Errorf("netns dir %s holds more than %d entries: not a runtime's netns dir", dir, MaxNetns)
	}
	scanned := 0
	for _, e := range ents {
		if err := ctx.Err(); err != nil {
			return "", scanned, err
		}
		if e.IsDir() {
			continue
		}
		scanned++
		path := filepath.Join(dir, e.Name())
		if ok, err := holds(path, ips); err == nil && ok {
			return path, scanned, nil
		}
	}
	return "", scanned, fmt.Errorf("%w (%d files in %s)", errNotFound, scanned, dir)
}

// holds reports whether the netns file at path has any of ips.
func holds(path string, ips []netip.Addr) (bool, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, err
	}
	defer f.Close()
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return false, err
	}
	if st.Type != unix.NSFS_MAGIC {
		return false, nil // a plain file: a netns not mounted, or not propagated to us
	}
	addrs, err := policy.Addrs(f)
	if err != nil {
		return false, err
	}
	for _, a := range addrs {
		if slices.Contains(ips, a.Unmap()) {
			return true, nil
		}
	}
	return false, nil
}
