package install

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/containernetworking/cni/libcni"
)

// ConfExtensions are the file extensions runtimes load from the conf dir.
var ConfExtensions = []string{".conf", ".conflist", ".json"}

// ErrNoPrimary means the conf dir holds no usable primary config yet.
var ErrNoPrimary = errors.New("no primary CNI config")

// Candidate is one config file in the conf dir and why it was or was not
// usable, in the order the runtime considers them.
type Candidate struct {
	Path string
	Err  error // nil: the runtime would load it
	data []byte
}

// chainOnlyTypes never set up a pod's interface; a list of only these has
// lost its primary plugin (e.g. an installer rewrote it without one).
var chainOnlyTypes = map[string]bool{
	"mesh-cni": true, "istio-cni": true, "linkerd-cni": true, "portmap": true,
	"bandwidth": true, "tuning": true, "firewall": true, "sbr": true, "loopback": true,
}

// FindPrimary picks the config the runtime uses, as containerd, CRI-O and
// kubelet do: the configured file name, or else the lexically first file
// with a config extension that libcni loads. It returns every file it
// looked at so callers can say why the earlier ones were skipped.
func FindPrimary(dir, fileName string) (string, []Candidate, error) {
	c, cands, err := findPrimary(dir, fileName)
	return c.Path, cands, err
}

// findPrimary also returns the content it validated, so the caller edits
// exactly what was judged, not a later read of a file being rewritten.
func findPrimary(dir, fileName string) (Candidate, []Candidate, error) {
	if fileName != "" {
		p := filepath.Join(dir, fileName)
		alt := ""
		switch filepath.Ext(fileName) {
		case ".conf":
			alt = p + "list"
		case ".conflist":
			alt = strings.TrimSuffix(p, "list")
		}
		var cands []Candidate
		for _, f := range []string{p, alt} {
			if f == "" {
				continue
			}
			if _, err := os.Lstat(f); err != nil {
				continue
			}
			c := checkConfig(f)
			cands = append(cands, c)
			if c.Err == nil {
				return c, cands, nil
			}
		}
		return Candidate{}, cands, fmt.Errorf("%w: %s not found or not valid in %s", ErrNoPrimary, fileName, dir)
	}
	files, err := libcni.ConfFiles(dir, ConfExtensions)
	if err != nil {
		return Candidate{}, nil, fmt.Errorf("read conf dir %s: %w", dir, err)
	}
	sort.Strings(files)
	var cands []Candidate
	for _, f := range files {
		if strings.HasPrefix(filepath.Base(f), ".") {
			continue // editor and installer temp files
		}
		c := checkConfig(f)
		cands = append(cands, c)
		if c.Err == nil {
			return c, cands, nil
		}
	}
	return Candidate{}, cands, fmt.Errorf("%w in %s", ErrNoPrimary, dir)
}

// checkConfig loads path the way the runtime does.
func checkConfig(path string) Candidate {
	c := Candidate{Path: path}
	fi, err := os.Stat(path)
	if err != nil {
		c.Err = err
		return c
	}
	if !fi.Mode().IsRegular() {
		c.Err = fmt.Errorf("not a regular file")
		return c
	}
	if c.data, c.Err = os.ReadFile(path); c.Err != nil {
		return c
	}
	_, c.Err = parseConfig(path, c.data)
	return c
}

// parseConfig validates data as libcni would load it from path.
func parseConfig(path string, data []byte) (*libcni.NetworkConfigList, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("empty file")
	}
	if strings.HasSuffix(path, ".conflist") {
		l, err := libcni.ConfListFromBytes(data)
		if err != nil {
			return nil, err
		}
		if len(l.Plugins) == 0 {
			return nil, fmt.Errorf("no plugins in list")
		}
		return l, nil
	}
	c, err := libcni.ConfFromBytes(data) //nolint:staticcheck // primaries still write .conf files; only this reads them
	if err != nil {
		if strings.Contains(err.Error(), "missing 'type'") {
			return nil, fmt.Errorf("%w; perhaps this is a .conflist", err)
		}
		return nil, err
	}
	return libcni.ConfListFromConf(c) //nolint:staticcheck // primaries still write .conf files; only this reads them
}

// describeSkipped says why the files before the primary were not used.
func describeSkipped(cands []Candidate) string {
	var parts []string
	for _, c := range cands {
		if c.Err != nil {
			parts = append(parts, fmt.Sprintf("%s: %v", filepath.Base(c.Path), c.Err))
		}
	}
	return strings.Join(parts, "; ")
}
