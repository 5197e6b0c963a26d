package nftables

import (
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"

	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// builder turns IR rules into nftables expressions for our inet table.
// Lists of addresses or ports become anonymous interval sets, added to the
// same batch before the rule that looks them up; with sets non-nil (Check)
// they are only recorded there, by set id.
type builder struct {
	conn   *nftables.Conn
	table  *nftables.Table
	setIDs uint32 // set ids are per batch; google/nftables' own counter is an unguarded global
	size   batchSize
	sets   map[uint32][]nftables.SetElement // Check records the sets here instead of adding them
}

// rules returns the expression lists r becomes, following the layout of
// rules.Nft: a rule without addresses is one rule (pinned with meta nfproto
// when the pod has one family); a rule with addresses is one rule per family
// it has prefixes of.
func (b *builder) rules(r rules.Rule, families []rules.Family) ([][]expr.Any, error) {
	if len(r.Src) == 0 && len(r.Dst) == 0 {
		var pin rules.Family
		if len(families) == 1 {
			pin = families[0]
		}
		e, err := b.exprs(r, pin, nil, nil)
		if err != nil || e == nil {
			return nil, err
		}
		return [][]expr.Any{e}, nil
	}
	var out [][]expr.Any
	for _, f := range families {
		src, dst := masked(rules.ForFamily(r.Src, f)), masked(rules.ForFamily(r.Dst, f))
		if (len(r.Src) > 0 && len(src) == 0) || (len(r.Dst) > 0 && len(dst) == 0) {
			continue
		}
		e, err := b.exprs(r, f, src, dst)
		if err != nil {
			return nil, err
		}
		if e != nil {
			out = append(out, e)
		}
	}
	return out, nil
}

func masked(ps []netip.Prefix) []netip.Prefix {
	out := make([]netip.Prefix, len(ps))
	for i, p := range ps {
		out[i] = p.Masked()
	}
	return out
}

// exprs returns the expressions of r for family fam (0: any family), or nil
// when r can never match. The matches come in the order rules.Nft prints
// them, then the counter and the verdict.
func (b *builder) exprs(r rules.Rule, fam rules.Family, src, dst []netip.Prefix) ([]expr.Any, error) {
	e := protoMatch(fam, r.Proto)
	if r.InIface != "" {
		e = append(e, iface(expr.MetaKeyIIFNAME, r.InIface, r.NotInIface)...)
	}
	if r.OutIface != "" {
		e = append(e, iface(expr.MetaKeyOIFNAME, r.OutIface, r.NotOutIface)...)
	}
	for _, m := range []struct {
		ps  []netip.Prefix
		not bool
		off uint32
	}{{src, r.NotSrc, srcOffset(fam)}, {dst, r.NotDst, dstOffset(fam)}} {
		ae, never, err := b.addrs(fam, m.ps, m.not, m.off)
		if err != nil {
			return nil, err
		}
		if never {
			return nil, nil
		}
		e = append(e, ae...)
	}
	for _, m := range []struct {
		ps  []rules.PortRange
		not bool
		off uint32
	}{{r.SPorts, false, 0}, {r.DPorts, r.NotDPorts, 2}} {
		pe, err := b.ports(m.ps, m.not, m.off)
		if err != nil {
			return nil, err
		}
		e = append(e, pe...)
	}
	e = append(e, ownerMatch(r)...)
	e = append(e, stateMatch(r)...)
	e = append(e, &expr.Counter{})
	v, err := verdict(r.Verdict, fam)
	if err != nil {
		return nil, err
	}
	return append(e, v...), nil
}

// protoMatch pins the family (0: none) and the layer 4 protocol (any:
// none).
func protoMatch(fam rules.Family, proto rules.Proto) []expr.Any {
	var e []expr.Any
	switch fam {
	case rules.IPv4:
		e = metaIs(e, expr.MetaKeyNFPROTO, unix.NFPROTO_IPV4)
	case rules.IPv6:
		e = metaIs(e, expr.MetaKeyNFPROTO, unix.NFPROTO_IPV6)
	}
	switch proto {
	case rules.TCP:
		e = metaIs(e, expr.MetaKeyL4PROTO, unix.IPPROTO_TCP)
	case rules.UDP:
		e = metaIs(e, expr.MetaKeyL4PROTO, unix.IPPROTO_UDP)
	}
	return e
}

// metaIs appends "meta key == v" for a one-byte key.
func metaIs(e []expr.Any, key expr.MetaKey, v byte) []expr.Any {
	return append(e, &expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{v}})
}

// ownerMatch matches the socket's UID (one or a range) and GID.
func ownerMatch(r rules.Rule) []expr.Any {
	var e []expr.Any
	switch {
	case r.UID != nil && r.UIDTo > *r.UID:
		// A range compares bytes in order: the host-order UID is turned
		// big-endian first, as nft does for "meta skuid a-b".
		e = append(e, &expr.Meta{Key: expr.MetaKeySKUID, Register: 1},
			&expr.Byteorder{SourceRegister: 1, DestRegister: 1, Op: expr.ByteorderHton, Len: 4, Size: 4},
			&expr.Range{Op: expr.CmpOpEq, Register: 1,
				FromData: binaryutil.BigEndian.PutUint32(*r.UID), ToData: binaryutil.BigEndian.PutUint32(r.UIDTo)})
	case r.UID != nil:
		e = append(e, &expr.Meta{Key: expr.MetaKeySKUID, Register: 1},
			&expr.Cmp{Op: op(r.NotUID), Register: 1, Data: binaryutil.NativeEndian.PutUint32(*r.UID)})
	}
	if r.GID != nil {
		e = append(e, &expr.Meta{Key: expr.MetaKeySKGID, Register: 1},
			&expr.Cmp{Op: op(r.NotGID), Register: 1, Data: binaryutil.NativeEndian.PutUint32(*r.GID)})
	}
	return e
}

// stateMatch matches the packet's mark, the connection's mark and its
// conntrack state.
func stateMatch(r rules.Rule) []expr.Any {
	var e []expr.Any
	if r.Mark != nil {
		e = append(e, &expr.Meta{Key: expr.MetaKeyMARK, Register: 1})
		e = append(e, markMatch(*r.Mark, r.NotMark)...)
	}
	if r.CtMark != nil {
		e = append(e, &expr.Ct{Key: expr.CtKeyMARK, Register: 1})
		e = append(e, markMatch(*r.CtMark, false)...)
	}
	if len(r.CtState) > 0 {
		var bits uint32
		for _, s := range r.CtState {
			bits |= ctBits[s]
		}
		e = append(e, &expr.Ct{Register: 1, Key: expr.CtKeySTATE},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
				Mask: binaryutil.NativeEndian.PutUint32(bits), Xor: make([]byte, 4)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)})
	}
	return e
}

// markMatch compares register 1, holding a mark, with m.
func markMatch(m rules.Mark, not bool) []expr.Any {
	var e []expr.Any
	if m.Mask != 0xffffffff {
		e = append(e, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(m.Mask), Xor: make([]byte, 4)})
	}
	return append(e, &expr.Cmp{Op: op(not), Register: 1, Data: binaryutil.NativeEndian.PutUint32(m.Value & m.Mask)})
}

var ctBits = map[string]uint32{
	"INVALID":     expr.CtStateBitINVALID,
	"ESTABLISHED": expr.CtStateBitESTABLISHED,
	"RELATED":     expr.CtStateBitRELATED,
	"NEW":         expr.CtStateBitNEW,
	"UNTRACKED":   expr.CtStateBitUNTRACKED,
}

func op(not bool) expr.CmpOp {
	if not {
		return expr.CmpOpNeq
	}
	return expr.CmpOpEq
}

// iface matches an interface name; a trailing "+" matches a name prefix, as
// in iptables.
func iface(key expr.MetaKey, name string, not bool) []expr.Any {
	var data []byte
	if n := len(name); n > 0 && name[n-1] == '+' {
		data = []byte(name[:n-1])
	} else {
		data = make([]byte, unix.IFNAMSIZ)
		copy(data, name)
	}
	return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: op(not), Register: 1, Data: data}}
}

func srcOffset(fam rules.Family) uint32 {
	if fam == rules.IPv6 {
		return 8
	}
	return 12
}

func dstOffset(fam rules.Family) uint32 {
	if fam == rules.IPv6 {
		return 24
	}
	return 16
}

func addrLen(fam rules.Family) uint32 {
	if fam == rules.IPv6 {
		return 16
	}
	return 4
}

func verdict(v rules.Verdict, fam rules.Family) ([]expr.Any, error) {
	switch v.Kind {
	case rules.Return:
		return []expr.Any{&expr.Verdict{Kind: expr.VerdictReturn}}, nil
	case rules.Accept:
		return []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}, nil
	case rules.Drop:
		return []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}}, nil
	case rules.Jump:
		return []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: v.Chain}}, nil
	case rules.RedirectTo:
		return []expr.Any{
			&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(v.Port)},
			&expr.Redir{RegisterProtoMin: 1},
		}, nil
	case rules.TProxyTo:
		// tproxy breaks the rule when no socket takes the packet, so the
		// mark and the accept only happen for packets the proxy receives,
		// as with the iptables TPROXY target.
		// Family 0 (a rule for both families) lets the kernel use the
		// packet's family.
		pf := map[rules.Family]byte{rules.IPv4: unix.NFPROTO_IPV4, rules.IPv6: unix.NFPROTO_IPV6}[fam]
		e := []expr.Any{
			&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(v.Port)},
			&expr.TProxy{Family: pf, TableFamily: unix.NFPROTO_INET, RegPort: 1},
		}
		e = append(e, setMark(v.Mark)...)
		return append(e, &expr.Verdict{Kind: expr.VerdictAccept}), nil
	case rules.SetMark:
		return setMark(v.Mark), nil
	case rules.ConnmarkSave:
		if v.Mark.Mask != 0 && v.Mark.Mask != 0xffffffff {
			return nil, fmt.Errorf("CONNMARK save with partial mask %#x is not supported", v.Mark.Mask)
		}
		return []expr.Any{&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
			&expr.Ct{Key: expr.CtKeyMARK, Register: 1, SourceRegister: true}}, nil
	case rules.ConnmarkRestore:
		if v.Mark.Mask != 0 && v.Mark.Mask != 0xffffffff {
			return nil, fmt.Errorf("CONNMARK restore with partial mask %#x is not supported", v.Mark.Mask)
		}
		return []expr.Any{&expr.Ct{Key: expr.CtKeyMARK, Register: 1},
			&expr.Meta{Key: expr.MetaKeyMARK, Register: 1, SourceRegister: true}}, nil
	}
	return nil, fmt.Errorf("unknown verdict %q", v.Kind)
}

// setMark is iptables' --set-xmark: mark = (mark & ^mask) ^ value.
func setMark(m rules.Mark) []expr.Any {
	if m.Mask == 0 && m.Value == 0 {
		return nil
	}
	if m.Mask == 0xffffffff {
		return []expr.Any{
			&expr.Immediate{Register: 1, Data: binaryutil.NativeEndian.PutUint32(m.Value)},
			&expr.Meta{Key: expr.MetaKeyMARK, Register: 1, SourceRegister: true},
		}
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(^m.Mask), Xor: binaryutil.NativeEndian.PutUint32(m.Value)},
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1, SourceRegister: true},
	}
}

func comment(c string) []byte {
	if c == "" {
		return nil
	}
	return userdata.AppendString(nil, userdata.TypeComment, c)
}
