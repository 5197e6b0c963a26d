package mesh

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// The bounds below are the one owner of what a UID, a port, an interface
// name and an interception mode may be; internal/config generates the chart's
// schema and docs/configuration.md from them.
const (
	// MaxID is the largest user or group ID: 4294967295 is (uid_t)-1,
	// which the kernel reads as "no ID".
	MaxID = 1<<32 - 2
	// MaxPort is the largest TCP or UDP port; 0 is never a port.
	MaxPort = 65535
	// MaxIfname is the longest interface name (IFNAMSIZ less the NUL).
	MaxIfname = 15
)

// Modes are the interception modes a profile may use.
var Modes = []rules.Mode{rules.Redirect, rules.TProxy}

// checkID checks a UID or GID given as a number.
func checkID(v int64) (uint32, error) {
	if v < 0 || v > MaxID {
		return 0, fmt.Errorf("%d is not a user or group ID from 0 to %d", v, MaxID)
	}
	return uint32(v), nil
}

// parseID parses a UID or GID.
func parseID(s string) (uint32, error) {
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 32)
	if err == nil && n <= MaxID {
		return uint32(n), nil
	}
	return 0, fmt.Errorf("invalid user or group ID %q: must be a number from 0 to %d", s, MaxID)
}

// checkMode checks an interception mode.
func checkMode(m string) (rules.Mode, error) {
	for _, ok := range Modes {
		if rules.Mode(m) == ok {
			return ok, nil
		}
	}
	return "", fmt.Errorf("%q is not REDIRECT or TPROXY", m)
}

// checkPort checks a port given as a number; zeroOK lets 0 through (for a
// key where 0 means none or the profile's).
func checkPort(v int, zeroOK bool) (uint16, error) {
	if v < 0 || v > MaxPort || (v == 0 && !zeroOK) {
		return 0, fmt.Errorf("%d is not a port from 1 to %d", v, MaxPort)
	}
	return uint16(v), nil
}
