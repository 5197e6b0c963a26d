// Package iptables programs a RuleSet with the host's iptables binaries,
// nft or legacy variant: one "iptables-restore --noflush" per address
// family, run in a sandbox inside the pod netns (see run.go) that never
// touches the host-wide xtables lock.
//
// The restore input is rules.IptablesRestore. When the netns may already
// hold our rules (a repeated ADD), they are listed with iptables-save and
// their removal is prepended to the same restore, so a re-apply is one
// transaction per table too. After any failure the netns holds none of our
// rules, in either family.
package iptables

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"
	goiptables "github.com/coreos/go-iptables/iptables"
	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/mesh-cni/mesh-cni/internal/backend/policy"
	"github.com/mesh-cni/mesh-cni/internal/backend/validate"
	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// Variant is the iptables flavour: the nf_tables based one or legacy
// x_tables.
type Variant string

const (
	NFT    Variant = "nft"
	Legacy Variant = "legacy"
)

// Backend runs the binaries of one variant.
type Backend struct {
	variant Variant
	bins    map[rules.Family]binaries
	restore func(s *sandbox, path, input string) error
}

type binaries struct{ restore, save string }

// searchDirs are tried after PATH: container runtimes often exec CNI
// plugins with a PATH that lacks the sbin directories.
var searchDirs = []string{"/usr/sbin", "/sbin", "/usr/local/sbin"}

// ToolsPathEnv, when set, is the whole list of directories (like PATH) the
// iptables tools are looked up in, instead of PATH and searchDirs: for
// hosts that keep them elsewhere, and to try a host without them.
const ToolsPathEnv = "MESH_CNI_TOOLS_PATH"

// toolDirs is where the tools are looked up, in order, without empty
// entries (an empty entry would mean the working directory).
func toolDirs() []string {
	list := append(filepath.SplitList(os.Getenv("PATH")), searchDirs...)
	if v, ok := os.LookupEnv(ToolsPathEnv); ok {
		list = filepath.SplitList(v)
	}
	var dirs []string
	for _, d := range list {
		if d != "" && !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

func lookPath(name string) (string, error) {
	dirs := toolDirs()
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in %s", name, strings.Join(dirs, ":"))
}

// New finds the variant's restore and save binaries for both families. It
// runs nothing: the plugin is exec'd per pod.
func New(v Variant) (*Backend, error) {
	if v != NFT && v != Legacy {
		return nil, fmt.Errorf("unknown iptables variant %q", v)
	}
	b := &Backend{variant: v, bins: map[rules.Family]binaries{}, restore: restore}
	for fam, prefix := range map[rules.Family]string{rules.IPv4: "iptables", rules.IPv6: "ip6tables"} {
		r, err := lookPath(fmt.Sprintf("%s-%s-restore", prefix, v))
		if err != nil {
			return nil, err
		}
		s, err := lookPath(fmt.Sprintf("%s-%s-save", prefix, v))
		if err != nil {
			return nil, err
		}
		b.bins[fam] = binaries{restore: r, save: s}
	}
	return b, nil
}

// Supported reports whether the variant's iptables works on this host, by
// asking go-iptables for its version (one exec of "iptables-<v> --version").
// For iptables-nft this process must also open an nf_tables netlink socket:
// it reads and removes that variant's chains itself. A binary the host runs
// natively can pass the version probe where this process cannot (qemu-user
// runs the plugin and refuses NETLINK_NETFILTER, but execs the host's
// iptables natively).
func Supported(v Variant) error {
	path, err := lookPath(fmt.Sprintf("iptables-%s", v))
	if err != nil {
		return err
	}
	if v == NFT {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
		if err != nil {
			return fmt.Errorf("nf_tables netlink socket: %w", err)
		}
		unix.Close(fd)
	}
	ipt, err := goiptables.New(goiptables.Path(path))
	if err != nil {
		return fmt.Errorf("iptables-%s: %w", v, err)
	}
	if a, b, _ := ipt.GetIptablesVersion(); a < 1 || a == 1 && b < 8 {
		return fmt.Errorf("iptables-%s is older than 1.8", v)
	}
	return nil
}

// Name is "iptables-nft" or "iptables-legacy".
func (b *Backend) Name() string { return "iptables-" + string(b.variant) }

func restore(s *sandbox, path, input string) error {
	_, err := s.run(path, input, "--noflush", "--wait=10")
	return err
}

func gone(netnsPath string) bool {
	_, err := os.Stat(netnsPath)
	return errors.Is(err, os.ErrNotExist)
}

// Apply programs rs, one restore per family. If any step fails, every rule
// of ours is removed from both families before the error is returned.
func (b *Backend) Apply(netnsPath string, rs rules.RuleSet) error {
	if err := validate.RuleSet(rs); err != nil {
		return b.fail(netnsPath, fmt.Errorf("invalid rule set: %w", err))
	}
	existed := false
	err := inSandbox(netnsPath, func(s *sandbox) error {
		// Both families: one the rule set no longer has may still hold
		// rules of an earlier Apply.
		for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
			input := rules.IptablesRestore(rs, fam) // empty if rs lacks fam
			old, err := b.existing(s, fam)
			if err != nil {
				return err
			}
			if old != nil {
				existed = true
				input = withCleanup(input, old.cleanup())
			}
			if input == "" {
				continue
			}
			if err := b.restore(s, b.bins[fam].restore, input); err != nil {
				return fmt.Errorf("%s: %w", fam, err)
			}
		}
		return nil
	})
	if err != nil {
		return b.fail(netnsPath, err)
	}
	// A netns without iptables tables before has no routes of ours either.
	if !existed && len(rs.PolicyRoutes) == 0 {
		return nil
	}
	ns, err := os.Open(netnsPath)
	if err != nil {
		return b.fail(netnsPath, fmt.Errorf("open netns: %w", err))
	}
	defer ns.Close()
	if err := policy.Apply(ns, rs); err != nil {
		return b.fail(netnsPath, err)
	}
	return nil
}

func (b *Backend) fail(netnsPath string, err error) error {
	if derr := b.Delete(netnsPath); derr != nil {
		return fmt.Errorf("%w (and removing our rules after the failure: %v)", err, derr) //nolint:errorlint // the second error is context, not a cause to match
	}
	return err
}

// existing returns the iptables-save dump of fam when the netns may hold
// rules, nil when it certainly holds none. The check costs no exec: a fresh
// pod netns has no iptables tables at all.
func (b *Backend) existing(s *sandbox, fam rules.Family) (*dump, error) {
	any, err := b.hasTables(fam)
	if err != nil || !any {
		return nil, err
	}
	out, err := s.run(b.bins[fam].save, "")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", fam, err)
	}
	return parse(out)
}

// hasTables reports whether the sandbox's netns has any iptables table of
// fam: for legacy the kernel's list of loaded x_tables, for nft the
// nf_tables tables of that family (listed through netlink).
func (b *Backend) hasTables(fam rules.Family) (bool, error) {
	if b.variant == Legacy {
		name := "/proc/thread-self/net/ip_tables_names"
		if fam == rules.IPv6 {
			name = "/proc/thread-self/net/ip6_tables_names"
		}
		data, err := os.ReadFile(name)
		if errors.Is(err, os.ErrNotExist) {
			return false, nil // x_tables not in this kernel at all
		}
		if err != nil {
			return false, err
		}
		return strings.TrimSpace(string(data)) != "", nil
	}
	c, err := nftables.New() // in the sandbox thread's netns
	if err != nil {
		return false, fmt.Errorf("nftables netlink: %w", err)
	}
	tf := nftables.TableFamilyIPv4
	if fam == rules.IPv6 {
		tf = nftables.TableFamilyIPv6
	}
	ts, err := c.ListTablesOfFamily(tf)
	if err != nil {
		return false, fmt.Errorf("list nftables tables: %w", err)
	}
	return len(ts) > 0, nil
}

// Delete removes our chains and the jumps to them in both families, and
// our policy routes. It succeeds when there is nothing to remove or the
// netns is gone. A netns without iptables tables costs no exec; the nft
// variant never execs (deleteNFT).
func (b *Backend) Delete(netnsPath string) error {
	if b.variant == NFT {
		return DeleteNFT(netnsPath)
	}
	return withNetns(netnsPath, func(ns *os.File) error { return b.deleteLegacy(netnsPath, ns) })
}

func (b *Backend) deleteLegacy(netnsPath string, ns *os.File) error {
	any, err := b.anyTables(netnsPath)
	if err != nil {
		return fmt.Errorf("remove iptables rules: %w", err)
	}
	if any {
		err := inSandbox(netnsPath, func(s *sandbox) error {
			var errs []error
			for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
				old, err := b.existing(s, fam)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				if old == nil {
					continue
				}
				if input := withCleanup("", old.cleanup()); input != "" {
					if err := b.restore(s, b.bins[fam].restore, input); err != nil {
						errs = append(errs, fmt.Errorf("%s: %w", fam, err))
					}
				}
			}
			return errors.Join(errs...)
		})
		if err != nil {
			return fmt.Errorf("remove iptables rules: %w", err)
		}
	}
	return policy.Delete(ns)
}

// DeleteNFT removes what the nft variant writes (our chains in the ip and
// ip6 nf_tables tables, and our policy routes) through netlink alone: it
// needs none of the iptables tools, so DEL works on a host that lacks them.
func DeleteNFT(netnsPath string) error {
	return withNetns(netnsPath, func(ns *os.File) error {
		if err := deleteNFT(ns); err != nil {
			return err
		}
		return policy.Delete(ns)
	})
}

// withNetns runs fn with the netns open; a gone netns is nothing to do.
func withNetns(netnsPath string, fn func(*os.File) error) error {
	if gone(netnsPath) {
		return nil
	}
	ns, err := os.Open(netnsPath)
	if err != nil {
		return fmt.Errorf("open netns: %w", err)
	}
	defer ns.Close()
	return fn(ns)
}

// anyTables reports whether the netns has iptables tables of either family,
// without the sandbox: the thread only visits the netns to look.
func (b *Backend) anyTables(netnsPath string) (bool, error) {
	var found bool
	var panicked any
	err := ns.WithNetNSPath(netnsPath, func(ns.NetNS) (err error) {
		defer func() { // raised again below, as in inSandbox
			if r := recover(); r != nil {
				panicked, err = r, errors.New("panic on the netns thread")
			}
		}()
		for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
			has, err := b.hasTables(fam)
			if err != nil {
				return err
			}
			found = found || has
		}
		return nil
	})
	if panicked != nil {
		panic(panicked)
	}
	return found, err
}
