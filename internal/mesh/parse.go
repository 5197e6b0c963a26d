package mesh

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// Wildcard is what include lists accept for "everything".
const Wildcard = "*"

// items splits a comma list, trimming blanks. An empty or blank string is an
// empty list; an empty item between commas is an error, so a typo never
// silently shortens the list. A list of more than MaxListItems is refused
// before it is split.
func items(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	if err := checkItems(s); err != nil {
		return nil, err
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = strings.TrimSpace(p)
		if parts[i] == "" {
			return nil, errors.New("empty item in list")
		}
	}
	return parts, nil
}

// ParsePorts parses a comma list of ports (1-65535) and inclusive ranges
// "a-b" (a <= b). A blank string is an empty, non-nil list.
func ParsePorts(s string) ([]rules.PortRange, error) {
	parts, err := items(s)
	if err != nil {
		return nil, err
	}
	out := make([]rules.PortRange, 0, len(parts))
	for _, p := range parts {
		r, err := parseRange(p)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func parseRange(s string) (rules.PortRange, error) {
	lo, hi, isRange := strings.Cut(s, "-")
	first, err := parsePort(lo)
	if err != nil {
		return rules.PortRange{}, fmt.Errorf("invalid port %q: %w", s, err)
	}
	if !isRange {
		return rules.PortRange{First: first, Last: first}, nil
	}
	last, err := parsePort(hi)
	if err != nil {
		return rules.PortRange{}, fmt.Errorf("invalid port range %q: %w", s, err)
	}
	if first > last {
		return rules.PortRange{}, fmt.Errorf("invalid port range %q: start is above end", s)
	}
	return rules.PortRange{First: first, Last: last}, nil
}

func parsePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 32)
	if err != nil || n < 1 || n > MaxPort {
		return 0, fmt.Errorf("must be a number from 1 to %d", MaxPort)
	}
	return uint16(n), nil
}

// ParseCIDRs parses a comma list of IPv4 and IPv6 prefixes; a bare address
// is a /32 or /128. Host bits are cleared ("10.1.2.3/8" is 10.0.0.0/8). A
// blank string is an empty, non-nil list.
func ParseCIDRs(s string) ([]netip.Prefix, error) {
	parts, err := items(s)
	if err != nil {
		return nil, err
	}
	out := make([]netip.Prefix, 0, len(parts))
	for _, p := range parts {
		pfx, err := parseCIDR(p)
		if err != nil {
			return nil, err
		}
		out = append(out, pfx)
	}
	return out, nil
}

func parseCIDR(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil || p.Addr().Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("invalid CIDR %q", s)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("invalid IP or CIDR %q", s)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// parseStarCIDRs is ParseCIDRs where "*" means every destination (nil). As
// in Istio, a "*" anywhere in the list wins.
func parseStarCIDRs(s string) ([]netip.Prefix, error) {
	if hasWildcard(s) {
		return nil, nil
	}
	return ParseCIDRs(s)
}

// parseStarPorts is ParsePorts where "*" means every port (nil).
func parseStarPorts(s string) ([]rules.PortRange, error) {
	if hasWildcard(s) {
		return nil, nil
	}
	return ParsePorts(s)
}

func hasWildcard(s string) bool {
	for _, p := range strings.Split(s, ",") {
		if strings.TrimSpace(p) == Wildcard {
			return true
		}
	}
	return false
}

// parseInterfaces parses a comma list of interface names.
func parseInterfaces(s string) ([]string, error) {
	parts, err := items(s)
	if err != nil {
		return nil, err
	}
	for _, p := range parts {
		if !validIfname(p) {
			return nil, fmt.Errorf("invalid interface name %q", p)
		}
	}
	return parts, nil
}

// validIfname follows the kernel's dev_valid_name.
func validIfname(s string) bool {
	if s == "" || len(s) > MaxIfname || s == "." || s == ".." {
		return false
	}
	for _, r := range s {
		if r == '/' || r == ':' || r == '"' || r <= ' ' || r > '~' {
			return false
		}
	}
	return true
}
