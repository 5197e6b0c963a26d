// Package nftables programs a RuleSet into a pod netns natively, through
// nf_tables netlink messages sent in-process: no binary on the host, one
// transaction for the whole rule set.
//
// The layout is the one rules.Nft prints for "mesh-cni explain": one
// "table inet mesh_cni" holds every chain of every IR table; a hooked chain
// is a base chain at the priority iptables uses for its table.
package nftables

import (
	"errors"
	"fmt"
	"os"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/mesh-cni/mesh-cni/pkg/backend/policy"
	"github.com/mesh-cni/mesh-cni/pkg/backend/validate"
	"github.com/mesh-cni/mesh-cni/pkg/rules"
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
	if err := applyTables(int(ns.Fd()), rs); err != nil {
		return b.fail(netnsPath, err)
	}
	if err := policy.Apply(ns, rs); err != nil {
		return b.fail(netnsPath, err)
	}
	return nil
}

// fail removes whatever of ours the netns holds and returns err.
func (b *Backend) fail(netnsPath string, err error) error {
	if derr := b.Delete(netnsPath); derr != nil {
		return fmt.Errorf("%w (and removing our rules after the failure: %v)", err, derr)
	}
	return err
}

func applyTables(nsfd int, rs rules.RuleSet) error {
	c, err := nftables.New(nftables.WithNetNSFd(nsfd))
	if err != nil {
		return fmt.Errorf("nftables netlink: %w", err)
	}
	// Adding the table first makes the delete succeed whether or not it
	// exists, so one batch replaces our table atomically without a listing.
	c.AddTable(table)
	c.DelTable(table)
	if err := addTable(c, rs); err != nil {
		return err
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables transaction: %w", err)
	}
	return nil
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

func addTable(c *nftables.Conn, rs rules.RuleSet) error {
	t := c.AddTable(&nftables.Table{Name: table.Name, Family: table.Family})
	chains := map[string]*nftables.Chain{}
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
		}
	}
	b := &builder{conn: c, table: t}
	for _, it := range rs.Tables {
		for _, ch := range it.Chains {
			for i, r := range ch.Rules {
				es, err := b.rules(r, rs.Families)
				if err != nil {
					return fmt.Errorf("%s chain %s rule %d: %w", it.Name, ch.Name, i+1, err)
				}
				for _, e := range es {
					c.AddRule(&nftables.Rule{Table: t, Chain: chains[ch.Name], Exprs: e, UserData: comment(r.Comment)})
				}
			}
		}
	}
	return nil
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
	c, err := nftables.New(nftables.WithNetNSFd(int(ns.Fd())))
	if err != nil {
		return fmt.Errorf("nftables netlink: %w", err)
	}
	c.AddTable(table)
	c.DelTable(table)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("remove nftables table: %w", err)
	}
	return policy.Delete(ns)
}

// Supported reports whether the kernel can run this backend: nf_tables
// with NAT redirection. It costs one netlink round trip in the caller's
// netns: a probe table holding a regular chain with a redirect rule is
// added and deleted in the same transaction, so nothing is left, no hook
// is registered and nothing else sees it. The kernel still loads (or
// fails to find) nf_tables, the inet family and the redir expression.
func Supported() error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables netlink: %w", err)
	}
	t := c.AddTable(&nftables.Table{Name: rules.NftTable + "_probe", Family: nftables.TableFamilyINet})
	ch := c.AddChain(&nftables.Chain{Name: "probe", Table: t})
	e, err := verdict(rules.Verdict{Kind: rules.RedirectTo, Port: 1}, 0)
	if err != nil {
		return err
	}
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: e})
	c.DelTable(t)
	if err := c.Flush(); err != nil {
		if errors.Is(err, unix.EPROTONOSUPPORT) {
			return fmt.Errorf("kernel has no nf_tables: %w", err)
		}
		return fmt.Errorf("nf_tables redirect probe: %w", err)
	}
	return nil
}
