// Package nftables programs a RuleSet into a pod netns natively, through
// nf_tables netlink messages sent in-process: no binary on the host, one
// transaction for the whole rule set.
//
// The layout is the one rules.Nft prints for "mesh-cnictl explain": one
// "table inet mesh_cni" holds every chain of every IR table; a hooked chain
// is a base chain at the priority iptables uses for its table.
package nftables

import (
	"errors"
	"fmt"
	"os"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/mesh-cni/mesh-cni/internal/backend/policy"
	"github.com/mesh-cni/mesh-cni/internal/backend/validate"
	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// Name is the backend's name in the plugin config.
const Name = "nftables"

// Backend is the native nftables backend. It keeps no state: every call
// opens its own short-lived netlink socket inside the target netns.
type Backend struct{}

// New returns the nftables backend.
func New() *Backend { return &Backend{} }

func (*Backend) Name() string { return Name }

// table is our one table.
var table = &nftables.Table{Name: rules.NftTable, Family: nftables.TableFamilyINet}

// openNS opens the netns file; gone reports a netns that no longer exists.
func openNS(netnsPath string) (f *os.File, gone bool, err error) {
	f, err = os.Open(netnsPath)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, true, err
		}
		return nil, false, fmt.Errorf("open netns %s: %w", netnsPath, err)
	}
	return f, false, nil
}

// openConn opens the netns and a netlink connection in it, for a reader;
// done closes both.
func openConn(netnsPath string) (ns *os.File, c *nftables.Conn, done func(), err error) {
	if ns, _, err = openNS(netnsPath); err != nil {
		return nil, nil, nil, err
	}
	if c, err = dial(int(ns.Fd())); err != nil {
		_ = ns.Close()
		return nil, nil, nil, err
	}
	return ns, c, func() { _ = c.CloseLasting(); _ = ns.Close() }, nil
}

// Apply replaces our table in the netns with rs in one transaction, then
// installs the TPROXY policy routes. On any failure it removes everything
// of ours, so the pod is never half redirected.
func (b *Backend) Apply(netnsPath string, rs rules.RuleSet) error {
	if err := validate.RuleSet(rs); err != nil {
		return b.fail(netnsPath, fmt.Errorf("invalid rule set: %w", err))
	}
	ns, _, err := openNS(netnsPath)
	if err != nil {
		return err
	}
	defer ns.Close()
	existed, err := applyTables(int(ns.Fd()), rs)
	if err != nil {
		return b.fail(netnsPath, err)
	}
	// A netns we never programmed has no routes of ours to replace.
	if !existed && len(rs.PolicyRoutes) == 0 {
		return nil
	}
	if err := policy.Apply(ns, rs); err != nil {
		return b.fail(netnsPath, err)
	}
	return nil
}

// fail removes whatever of ours the netns holds and returns err.
func (b *Backend) fail(netnsPath string, err error) error {
	if derr := b.Delete(netnsPath); derr != nil {
		return fmt.Errorf("%w (and removing our rules after the failure: %v)", err, derr) //nolint:errorlint // the second error is context, not a cause to match
	}
	return err
}

// dial opens one netlink socket in the netns for every request of the
// caller: each transient socket would cost a thread switch into the netns
// and back.
func dial(nsfd int, opts ...nftables.ConnOption) (*nftables.Conn, error) {
	return checkDial(nftables.New(append([]nftables.ConnOption{nftables.WithNetNSFd(nsfd), nftables.AsLasting(), keepOption()}, opts...)...))
}

// checkDial wraps a failed dial's error, marking a kernel without
// nf_tables netlink (ErrNoNetlink), and refuses a nil connection that
// comes without an error.
func checkDial(c *nftables.Conn, err error) (*nftables.Conn, error) {
	switch {
	case err != nil && (errors.Is(err, unix.EPROTONOSUPPORT) || errors.Is(err, unix.EAFNOSUPPORT)):
		return nil, fmt.Errorf("nftables netlink: %w: %w", ErrNoNetlink, err)
	case err != nil:
		return nil, fmt.Errorf("nftables netlink: %w", err)
	case c == nil:
		return nil, errors.New("nftables netlink: no connection and no error")
	}
	return c, nil
}

// applyTables programs rs and reports whether our table was there before.
// A pod's netns is new at ADD, so the table is first created exclusively,
// with no dump before it; only when it exists (a re-apply) does the kernel
// refuse that batch whole, and a second one replaces the table.
func applyTables(nsfd int, rs rules.RuleSet) (existed bool, err error) {
	err = transaction(nsfd, rs, false)
	if !errors.Is(err, unix.EEXIST) {
		return false, err
	}
	return true, transaction(nsfd, rs, true)
}

// transaction sends rs as one batch on its own socket (a refused batch
// leaves no acknowledgements behind for the next one). replace deletes and
// re-adds our table in the same batch, so the pod is never without its
// rules; only a re-apply pays for the delete (the kernel waits for an RCU
// grace period, milliseconds).
func transaction(nsfd int, rs rules.RuleSet, replace bool) error {
	var sock *netlink.Conn
	c, err := dial(nsfd, nftables.WithSockOptions(func(nc *netlink.Conn) error { sock = nc; return nil }))
	if err != nil {
		return err
	}
	defer func() { _ = c.CloseLasting() }()
	t := &nftables.Table{Name: table.Name, Family: table.Family}
	if replace {
		c.DelTable(table)
		t = c.AddTable(t)
	} else {
		t = c.CreateTable(t)
	}
	size, err := addChains(c, t, rs)
	if err != nil {
		return err
	}
	if err := size.fit(sock); err != nil {
		return err
	}
	if err := c.Flush(); err != nil {
		if unsupported(err) {
			return fmt.Errorf("nftables transaction: %w: %w", ErrUnsupported, err)
		}
		return fmt.Errorf("nftables transaction: %w", err)
	}
	return nil
}

// haveTable reports whether the netns holds our table: one dump of the
// inet tables, empty in a fresh pod netns.
func haveTable(c *nftables.Conn) (bool, error) {
	ts, err := c.ListTablesOfFamily(table.Family)
	if err != nil {
		return false, fmt.Errorf("list nftables tables: %w", err)
	}
	for _, t := range ts {
		if t.Name == table.Name {
			return true, nil
		}
	}
	return false, nil
}

// hookSpec is where a hooked chain of IR table t attaches (rules.NftBaseChain).
func hookSpec(t string, h rules.Hook) (*nftables.ChainHook, *nftables.ChainPriority, nftables.ChainType) {
	typ, hook, prio := rules.NftBaseChain(t, h)
	nh := nftables.ChainHookPrerouting
	if hook == "output" {
		nh = nftables.ChainHookOutput
	}
	return nh, nftables.ChainPriorityRef(nftables.ChainPriority(prio)), nftables.ChainType(typ)
}

func addChains(c *nftables.Conn, t *nftables.Table, rs rules.RuleSet) (batchSize, error) {
	chains := map[string]*nftables.Chain{}
	b := &builder{conn: c, table: t}
	b.size.add(2, 0) // the table (deleted and) added
	// Chains first: rules may jump forward.
	for _, it := range rs.Tables {
		for _, ch := range it.Chains {
			nc := &nftables.Chain{Name: ch.Name, Table: t}
			if ch.Hook != rules.NoHook {
				accept := nftables.ChainPolicyAccept
				nc.Hooknum, nc.Priority, nc.Type = hookSpec(it.Name, ch.Hook)
				nc.Policy = &accept
			}
			chains[ch.Name] = c.AddChain(nc)
			b.size.add(1, 0)
		}
	}
	for _, it := range rs.Tables {
		for _, ch := range it.Chains {
			for i, r := range ch.Rules {
				es, err := b.rules(r, rs.Families)
				if err != nil {
					return batchSize{}, fmt.Errorf("%s chain %s rule %d: %w", it.Name, ch.Name, i+1, err)
				}
				for _, e := range es {
					ud := comment(r.Comment)
					c.AddRule(&nftables.Rule{Table: t, Chain: chains[ch.Name], Exprs: e, UserData: ud})
					b.size.add(1, len(ud)+len(e)*maxExprBytes)
				}
			}
		}
	}
	return b.size, nil
}

// Delete removes our table and policy routes. It succeeds when they, or
// the netns, are already gone.
func (b *Backend) Delete(netnsPath string) error {
	ns, gone, err := openNS(netnsPath)
	if gone {
		return nil
	}
	if err != nil {
		return err
	}
	defer ns.Close()
	c, err := dial(int(ns.Fd()))
	if errors.Is(err, ErrNoNetlink) {
		// No nf_tables here: no table of ours can exist.
		return policy.Delete(ns)
	}
	if err != nil {
		return err
	}
	defer func() { _ = c.CloseLasting() }()
	exists, err := haveTable(c)
	if err != nil {
		return err
	}
	if exists {
		c.DelTable(table)
		if err := c.Flush(); err != nil {
			return fmt.Errorf("remove nftables table: %w", err)
		}
	}
	return policy.Delete(ns)
}

// ErrUnsupported marks a transaction the kernel refused for lack of a
// feature (an expression, chain type or family it does not have), as
// opposed to a bad rule set: the caller may fall back to iptables.
var ErrUnsupported = errors.New("the kernel lacks an nf_tables feature this rule set needs")

// ErrNoNetlink marks an nf_tables netlink socket the kernel would not
// create (no nfnetlink, or an emulator without it): nothing can be written
// or exist through it. It is an ErrUnsupported.
var ErrNoNetlink = fmt.Errorf("no nf_tables netlink socket: %w", ErrUnsupported)

func unsupported(err error) bool {
	for _, e := range []error{unix.EOPNOTSUPP, unix.ENOENT, unix.EPROTONOSUPPORT, unix.EAFNOSUPPORT} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Available reports whether the kernel speaks nf_tables, with one netlink
// dump in the caller's netns (tens of microseconds). Whether it has NAT
// and TPROXY support shows in the first Apply, whose batch is atomic:
// refused, it leaves nothing and fails with ErrUnsupported. A probe that
// creates and removes a table would cost an RCU grace period (milliseconds)
// on every plugin run.
func Available() error {
	c, err := checkDial(nftables.New(nftables.AsLasting(), keepOption()))
	if err != nil {
		return err
	}
	defer func() { _ = c.CloseLasting() }()
	if _, err := c.ListTablesOfFamily(nftables.TableFamilyINet); err != nil {
		return fmt.Errorf("kernel has no nf_tables: %w", err)
	}
	return nil
}
