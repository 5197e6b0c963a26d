// Package policy programs the policy routes TPROXY needs in a pod netns:
// "ip rule fwmark M lookup T" and "local default dev lo table T", per
// family. Every rule and route it adds carries protocol Proto, so Delete
// finds exactly ours without being told the marks and tables.
package policy

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/mesh-cni/mesh-cni/pkg/rules"
)

// Proto is the routing protocol number on our ip rules and routes ("ip rule
// show proto 109"). It is unassigned in iproute2's rt_protos.
const Proto = 109

func handle(ns *os.File) (*netlink.Handle, error) {
	h, err := netlink.NewHandleAt(netns.NsHandle(ns.Fd()), unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink in netns: %w", err)
	}
	return h, nil
}

func afs(f rules.Family) (int, *net.IPNet) {
	if f == rules.IPv6 {
		return unix.AF_INET6, &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
	}
	return unix.AF_INET, &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}
}

// Apply replaces our policy routes with those of rs. A netns without them
// costs one rule dump.
func Apply(ns *os.File, rs rules.RuleSet) error {
	h, err := handle(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	if err := remove(h); err != nil {
		return err
	}
	if len(rs.PolicyRoutes) == 0 {
		return nil
	}
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("policy route: loopback: %w", err)
	}
	// The kernel refuses an IPv6 route on a down device. The runtime's
	// loopback plugin brings lo up anyway, but not always before us.
	if lo.Attrs().Flags&net.FlagUp == 0 {
		if err := h.LinkSetUp(lo); err != nil {
			return fmt.Errorf("policy route: set lo up: %w", err)
		}
	}
	for _, fam := range rs.Families {
		af, all := afs(fam)
		for _, p := range rs.PolicyRoutes {
			rt := &netlink.Route{LinkIndex: lo.Attrs().Index, Dst: all, Table: p.Table, Type: unix.RTN_LOCAL,
				Scope: unix.RT_SCOPE_HOST, Protocol: Proto, Family: af}
			if err := h.RouteReplace(rt); err != nil {
				return fmt.Errorf("%s policy route: local default dev lo table %d: %w", fam, p.Table, err)
			}
			r := ruleFor(af, p)
			if err := h.RuleAdd(r); err != nil && !errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("%s policy route: ip rule fwmark %#x lookup %d: %w", fam, p.Mark, p.Table, err)
			}
		}
	}
	return nil
}

func ruleFor(af int, p rules.PolicyRoute) *netlink.Rule {
	r := netlink.NewRule()
	r.Family = af
	r.Mark = p.Mark
	mask := uint32(0xffffffff)
	r.Mask = &mask
	r.Table = p.Table
	r.Protocol = Proto
	return r
}

// Delete removes our ip rules and the routes in their tables. It succeeds
// when there are none.
func Delete(ns *os.File) error {
	h, err := handle(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	return remove(h)
}

func ours(h *netlink.Handle) ([]netlink.Rule, error) {
	all, err := h.RuleList(unix.AF_UNSPEC)
	if err != nil {
		return nil, fmt.Errorf("list ip rules: %w", err)
	}
	var out []netlink.Rule
	for _, r := range all {
		if r.Protocol == Proto {
			out = append(out, r)
		}
	}
	return out, nil
}

func remove(h *netlink.Handle) error {
	rs, err := ours(h)
	if err != nil {
		return err
	}
	for _, r := range rs {
		if err := h.RuleDel(&r); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("delete ip rule fwmark %#x lookup %d: %w", r.Mark, r.Table, err)
		}
		routes, err := h.RouteListFiltered(r.Family, &netlink.Route{Table: r.Table, Protocol: Proto},
			netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			return fmt.Errorf("list routes of table %d: %w", r.Table, err)
		}
		for _, rt := range routes {
			if err := h.RouteDel(&rt); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("delete route in table %d: %w", r.Table, err)
			}
		}
	}
	return nil
}

// Check returns an error naming the first policy route of rs that is
// missing from the netns.
func Check(ns *os.File, rs rules.RuleSet) error {
	if len(rs.PolicyRoutes) == 0 {
		return nil
	}
	h, err := handle(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	have, err := ours(h)
	if err != nil {
		return err
	}
	for _, fam := range rs.Families {
		af, _ := afs(fam)
		for _, p := range rs.PolicyRoutes {
			found := false
			for _, r := range have {
				if r.Family == af && r.Mark == p.Mark && r.Table == p.Table {
					found = true
				}
			}
			if !found {
				return fmt.Errorf("%s ip rule fwmark %#x lookup %d is missing", fam, p.Mark, p.Table)
			}
			routes, err := h.RouteListFiltered(af, &netlink.Route{Table: p.Table, Protocol: Proto, Type: unix.RTN_LOCAL},
				netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TYPE)
			if err != nil {
				return fmt.Errorf("list routes of table %d: %w", p.Table, err)
			}
			if len(routes) == 0 {
				return fmt.Errorf("%s route local default dev lo table %d is missing", fam, p.Table)
			}
		}
	}
	return nil
}
