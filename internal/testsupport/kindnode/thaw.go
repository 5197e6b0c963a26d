// Package kindnode helps tear down kind node containers on hosts where a
// node can get stuck.
//
// On cgroup v1 hosts, runc inside a node freezes a container's cgroup while
// it updates it; when the node is killed in that window (a cluster deleted
// while pods start) the cgroup stays frozen, its tasks cannot receive
// SIGKILL, and Docker can neither stop nor remove the node ("did not
// receive an exit event"). Thawing the node's cgroup subtree lets the
// pending kill land.
package kindnode

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// CgroupRoot is where the cgroup hierarchies are mounted.
var CgroupRoot = "/sys/fs/cgroup"

// ThawUnder thaws every frozen cgroup at or below the cgroup of pid (the
// node container's init), in the v1 freezer hierarchy and in the unified
// (v2) one, and returns how many it thawed.
func ThawUnder(pid int) (int, error) {
	dirs, err := cgroupDirs(pid)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, d := range dirs {
		err := filepath.WalkDir(d, func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				if os.IsNotExist(err) {
					return nil // removed while we walk
				}
				return err
			}
			if e.IsDir() {
				return nil
			}
			thawed, err := thaw(path, e.Name())
			if thawed {
				n++
			}
			return err
		})
		if err != nil {
			return n, fmt.Errorf("thaw cgroups under %s: %w", d, err)
		}
	}
	return n, nil
}

// thaw thaws one cgroup through its freezer file, if it is frozen.
func thaw(path, name string) (bool, error) {
	var frozen, thawed string
	switch name {
	case "freezer.state": // v1
		frozen, thawed = "FROZEN", "THAWED"
	case "cgroup.freeze": // v2
		frozen, thawed = "1", "0"
	default:
		return false, nil
	}
	b, err := os.ReadFile(path)
	if err != nil || strings.TrimSpace(string(b)) != frozen {
		return false, nil //nolint:nilerr // gone or not frozen: nothing to do
	}
	if err := os.WriteFile(path, []byte(thawed), 0); err != nil {
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	return true, nil
}

// cgroupDirs lists pid's cgroup directories that can hold freezers.
func cgroupDirs(pid int) ([]string, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return nil, fmt.Errorf("cgroups of pid %d: %w", pid, err)
	}
	defer f.Close()
	var dirs []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) == 3 {
			// A kind node's systemd sits in init.scope (cgroup v2, and
			// the v1 controllers systemd manages), beside the kubelet's
			// slices: the node is the cgroup above it.
			parts[2] = strings.TrimSuffix(parts[2], "/init.scope")
		}
		if len(parts) != 3 || parts[2] == "/" || parts[2] == "" {
			continue // never the whole hierarchy
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			dirs = append(dirs, filepath.Join(CgroupRoot, "unified", parts[2]), filepath.Join(CgroupRoot, parts[2]))
		case hasController(parts[1], "freezer"):
			dirs = append(dirs, filepath.Join(CgroupRoot, "freezer", parts[2]))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("cgroups of pid %d: %w", pid, err)
	}
	var existing []string
	for _, d := range dirs {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			existing = append(existing, d)
		}
	}
	return existing, nil
}

func hasController(list, c string) bool {
	for _, x := range strings.Split(list, ",") {
		if x == c {
			return true
		}
	}
	return false
}
