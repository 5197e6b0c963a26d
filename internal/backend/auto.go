package backend

import (
	"errors"
	"fmt"

	"github.com/mesh-cni/mesh-cni/internal/backend/iptables"
	"github.com/mesh-cni/mesh-cni/internal/backend/nftables"
	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// detect picks the backend for "auto". With nf_tables it returns nftables
// backed by iptables: a kernel that speaks nf_tables but lacks NAT or
// TPROXY support refuses the first (atomic) transaction, and the rules go
// in through iptables instead. Without nf_tables it returns iptables-nft
// or iptables-legacy, whichever works, as a fallback from nftables
// (FallbackFrom). A kernel without nf_tables netlink fails iptables-nft's
// own probe (iptables-nft --version), leaving iptables-legacy.
func detect() (Backend, error) {
	nftErr := nftables.Available()
	if nftErr == nil {
		return &auto{primary: nftables.New(), fallback: iptablesFallback}, nil
	}
	b, err := iptablesFallback()
	if err != nil {
		return nil, fmt.Errorf("no usable backend: nftables: %v; %w", nftErr, err) //nolint:errorlint // the second error is context, not a cause to match
	}
	return fellBack{Backend: b, from: nftables.Name}, nil
}

// fellBack is a backend auto chose because from could not run.
type fellBack struct {
	Backend
	from string
}

func (f fellBack) fallbackFrom() string { return f.from }

// FallbackFrom names the backend that could not run when b (auto) wrote
// with another one instead; "" when it did not fall back. After Apply, it
// answers for that Apply.
func FallbackFrom(b Backend) string {
	if f, ok := b.(interface{ fallbackFrom() string }); ok {
		return f.fallbackFrom()
	}
	return ""
}

func iptablesFallback() (Backend, error) {
	var errs []error
	for _, v := range []iptables.Variant{iptables.NFT, iptables.Legacy} {
		err := iptables.Supported(v)
		if err == nil {
			return iptables.New(v)
		}
		errs = append(errs, fmt.Errorf("iptables-%s: %w", v, err))
	}
	return nil, errors.Join(errs...)
}

// auto is the primary backend with a fallback taken only when the kernel
// lacks a feature the primary needs.
type auto struct {
	primary  Backend
	fallback func() (Backend, error)
	used     Backend
}

func (a *auto) fallbackFrom() string {
	if a.used != nil && a.used != a.primary {
		return a.primary.Name()
	}
	return ""
}

// Name is the backend that programmed the last Apply, else the primary.
func (a *auto) Name() string {
	if a.used != nil {
		return a.used.Name()
	}
	return a.primary.Name()
}

func (a *auto) Apply(netnsPath string, rs rules.RuleSet) error {
	err := a.primary.Apply(netnsPath, rs)
	if !errors.Is(err, nftables.ErrUnsupported) {
		a.used = a.primary
		return err
	}
	fb, ferr := a.fallback()
	if ferr != nil {
		return fmt.Errorf("%w (no iptables to fall back to: %v)", err, ferr) //nolint:errorlint // the second error is context, not a cause to match
	}
	a.used = fb
	if ferr := fb.Apply(netnsPath, rs); ferr != nil {
		return fmt.Errorf("%s: %w (after %s: %v)", fb.Name(), ferr, a.primary.Name(), err) //nolint:errorlint // the second error is context, not a cause to match
	}
	return nil
}

// Check passes when either backend holds the rules: a pod programmed
// through the fallback has no nftables table.
func (a *auto) Check(netnsPath string, rs rules.RuleSet) error {
	err := a.primary.Check(netnsPath, rs)
	if err == nil {
		return nil
	}
	fb, ferr := a.fallback()
	if ferr != nil {
		return err
	}
	if fb.Check(netnsPath, rs) == nil {
		return nil
	}
	return err
}

// Delete removes what either may have written: DEL cannot know which one
// ADD used. The iptables variants whose binaries exist look for their
// tables without an exec and find none in a netns nftables programmed.
func (a *auto) Delete(netnsPath string) error {
	err := a.primary.Delete(netnsPath)
	for _, v := range []iptables.Variant{iptables.NFT, iptables.Legacy} {
		if b, nerr := iptables.New(v); nerr == nil {
			err = errors.Join(err, b.Delete(netnsPath))
		}
	}
	return err
}
