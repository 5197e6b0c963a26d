// Package policy programs the policy routes TPROXY needs in a pod netns:
// "ip rule fwmark M lookup T" and "local default dev lo table T", per
// family. Every rule and route it adds carries protocol Proto, so Delete
// finds exactly ours without being told the marks and tables.
//
// It speaks rtnetlink through github.com/mdlayher/netlink, the netlink
// library the nftables backend already links (rtnl.go holds the messages).
package policy

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// Proto is the routing protocol number on our ip rules and routes ("ip rule
// show proto 109"). It is unassigned in iproute2's rt_protos.
const Proto = 109

func afOf(f rules.Family) uint8 {
	if f == rules.IPv6 {
		return unix.AF_INET6
	}
	return unix.AF_INET
}

// Apply replaces our policy routes with those of rs. A netns without them
// costs one rule dump.
func Apply(ns *os.File, rs rules.RuleSet) error {
	c, err := dial(ns)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := remove(c); err != nil {
		return err
	}
	if len(rs.PolicyRoutes) == 0 {
		return nil
	}
	lo, err := c.linkByName("lo")
	if err != nil {
		return fmt.Errorf("policy route: loopback: %w", err)
	}
	// The kernel refuses an IPv6 route on a down device. The runtime's
	// loopback plugin brings lo up anyway, but not always before us.
	if lo.flags&unix.IFF_UP == 0 {
		if err := c.linkSetUp(lo.index); err != nil {
			return fmt.Errorf("policy route: set lo up: %w", err)
		}
	}
	for _, fam := range rs.Families {
		af := afOf(fam)
		for _, p := range rs.PolicyRoutes {
			rt := route{family: af, table: uint32(p.Table), typ: unix.RTN_LOCAL, scope: unix.RT_SCOPE_HOST,
				protocol: Proto, oif: uint32(lo.index), dst: make([]byte, addrLen(af))}
			if err := c.routeReplace(rt); err != nil {
				return fmt.Errorf("%s policy route: local default dev lo table %d: %w", fam, p.Table, err)
			}
			if err := c.ruleAdd(ruleFor(af, p)); err != nil && !errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("%s policy route: ip rule fwmark %#x lookup %d: %w", fam, p.Mark, p.Table, err)
			}
		}
	}
	return nil
}

func ruleFor(af uint8, p rules.PolicyRoute) rule {
	return rule{family: af, mark: p.Mark, mask: 0xffffffff, hasMask: true, table: uint32(p.Table), protocol: Proto}
}

func addrLen(af uint8) int {
	if af == unix.AF_INET6 {
		return 16
	}
	return 4
}

// Delete removes our ip rules and the routes in their tables. It succeeds
// when there are none.
func Delete(ns *os.File) error {
	c, err := dial(ns)
	if err != nil {
		return err
	}
	defer c.Close()
	return remove(c)
}

func ours(c *conn) ([]rule, error) {
	all, err := c.ruleList()
	if errors.Is(err, unix.EOPNOTSUPP) {
		// No policy routing here (a kernel without multiple tables, or
		// qemu-user, whose rtnetlink translation has no rule messages:
		// linux-user/fd-trans.c, target_to_host_data_route): no rule of
		// ours can exist, and adding one fails with the reason.
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list ip rules: %w", err)
	}
	var out []rule
	for _, r := range all {
		if r.protocol == Proto {
			out = append(out, r)
		}
	}
	return out, nil
}

// routesOf lists the routes of family af in table with protocol Proto; typ
// 0 means any type.
func routesOf(c *conn, af uint8, table uint32, typ uint8) ([]route, error) {
	all, err := c.routeList(af)
	if err != nil {
		return nil, err
	}
	var out []route
	for _, rt := range all {
		if rt.table == table && rt.protocol == Proto && (typ == 0 || rt.typ == typ) {
			out = append(out, rt)
		}
	}
	return out, nil
}

func remove(c *conn) error {
	rs, err := ours(c)
	if err != nil {
		return err
	}
	for _, r := range rs {
		if err := c.ruleDel(r); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("delete ip rule fwmark %#x lookup %d: %w", r.mark, r.table, err)
		}
		routes, err := routesOf(c, r.family, r.table, 0)
		if err != nil {
			return fmt.Errorf("list routes of table %d: %w", r.table, err)
		}
		for _, rt := range routes {
			if err := c.routeDel(rt); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("delete route in table %d: %w", r.table, err)
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
	c, err := dial(ns)
	if err != nil {
		return err
	}
	defer c.Close()
	have, err := ours(c)
	if err != nil {
		return err
	}
	for _, fam := range rs.Families {
		af := afOf(fam)
		for _, p := range rs.PolicyRoutes {
			found := false
			for _, r := range have {
				if r.family == af && r.mark == p.Mark && r.table == uint32(p.Table) {
					found = true
				}
			}
			if !found {
				return fmt.Errorf("%s ip rule fwmark %#x lookup %d is missing", fam, p.Mark, p.Table)
			}
			routes, err := routesOf(c, af, uint32(p.Table), unix.RTN_LOCAL)
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
