package nftables

import (
	"bytes"
	"fmt"
	"net/netip"
	"sort"

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
// when r can never match.
func (b *builder) exprs(r rules.Rule, fam rules.Family, src, dst []netip.Prefix) ([]expr.Any, error) {
	var e []expr.Any
	switch fam {
	case rules.IPv4:
		e = append(e, &expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}})
	case rules.IPv6:
		e = append(e, &expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV6}})
	}
	switch r.Proto {
	case rules.TCP:
		e = append(e, &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}})
	case rules.UDP:
		e = append(e, &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_UDP}})
	}
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
	e = append(e, &expr.Counter{})
	v, err := verdict(r.Verdict, fam)
	if err != nil {
		return nil, err
	}
	return append(e, v...), nil
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

// addrs matches a list of prefixes at header offset off. never is true when
// the match can never hold (the negation of a /0).
func (b *builder) addrs(fam rules.Family, ps []netip.Prefix, not bool, off uint32) (e []expr.Any, never bool, err error) {
	if len(ps) == 0 {
		return nil, false, nil
	}
	for _, p := range ps {
		if p.Bits() == 0 {
			return nil, not, nil // matches every address of the family
		}
	}
	load := &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: addrLen(fam)}
	if len(ps) == 1 {
		p := ps[0]
		e = append(e, load)
		if p.Bits() < p.Addr().BitLen() {
			e = append(e, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: addrLen(fam),
				Mask: prefixMask(p), Xor: make([]byte, addrLen(fam))})
		}
		return append(e, &expr.Cmp{Op: op(not), Register: 1, Data: p.Addr().AsSlice()}), false, nil
	}
	var ranges [][2][]byte
	for _, p := range ps {
		ranges = append(ranges, [2][]byte{p.Addr().AsSlice(), lastAddr(p)})
	}
	keyType := nftables.TypeIPAddr
	if fam == rules.IPv6 {
		keyType = nftables.TypeIP6Addr
	}
	lookup, err := b.set(keyType, ranges, not)
	if err != nil {
		return nil, false, err
	}
	return []expr.Any{load, lookup}, false, nil
}

func (b *builder) ports(ps []rules.PortRange, not bool, off uint32) ([]expr.Any, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	load := &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: off, Len: 2}
	if len(ps) == 1 {
		p := ps[0]
		if p.First == p.Last {
			return []expr.Any{load, &expr.Cmp{Op: op(not), Register: 1, Data: binaryutil.BigEndian.PutUint16(p.First)}}, nil
		}
		return []expr.Any{load, &expr.Range{Op: op(not), Register: 1,
			FromData: binaryutil.BigEndian.PutUint16(p.First), ToData: binaryutil.BigEndian.PutUint16(p.Last)}}, nil
	}
	var ranges [][2][]byte
	for _, p := range ps {
		ranges = append(ranges, [2][]byte{binaryutil.BigEndian.PutUint16(p.First), binaryutil.BigEndian.PutUint16(p.Last)})
	}
	lookup, err := b.set(nftables.TypeInetService, ranges, not)
	if err != nil {
		return nil, err
	}
	return []expr.Any{load, lookup}, nil
}

// set adds an anonymous interval set holding the inclusive ranges and
// returns the lookup into it.
func (b *builder) set(keyType nftables.SetDatatype, ranges [][2][]byte, not bool) (expr.Any, error) {
	b.setIDs++
	s := &nftables.Set{Table: b.table, ID: b.setIDs, Name: "__set%d", Anonymous: true, Constant: true, Interval: true, KeyType: keyType}
	elems := intervals(ranges)
	if b.sets != nil {
		b.sets[s.ID] = elems
	} else if err := b.conn.AddSet(s, elems); err != nil {
		return nil, fmt.Errorf("anonymous set: %w", err)
	}
	b.size.add(2, len(elems)*maxElemBytes) // the set and its elements
	return &expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID, Invert: not}, nil
}

// intervals merges overlapping inclusive ranges and encodes them the way nft
// does: a start element and an end element one past the range, which is left
// out when the range runs to the top of the key space.
func intervals(ranges [][2][]byte) []nftables.SetElement {
	sort.Slice(ranges, func(i, j int) bool { return bytes.Compare(ranges[i][0], ranges[j][0]) < 0 })
	var merged [][2][]byte
	for _, r := range ranges {
		if n := len(merged); n > 0 {
			last := &merged[n-1]
			end, ok := next(last[1])
			if !ok || bytes.Compare(r[0], end) <= 0 {
				if bytes.Compare(r[1], last[1]) > 0 {
					last[1] = r[1]
				}
				continue
			}
		}
		merged = append(merged, r)
	}
	var elems []nftables.SetElement
	for _, r := range merged {
		elems = append(elems, nftables.SetElement{Key: r[0]})
		if end, ok := next(r[1]); ok {
			elems = append(elems, nftables.SetElement{Key: end, IntervalEnd: true})
		}
	}
	return elems
}

// next returns b+1 as a big-endian number; ok is false on overflow.
func next(b []byte) ([]byte, bool) {
	out := append([]byte(nil), b...)
	for i := len(out) - 1; i >= 0; i-- {
		out[i]++
		if out[i] != 0 {
			return out, true
		}
	}
	return nil, false
}

func prefixMask(p netip.Prefix) []byte {
	m := make([]byte, p.Addr().BitLen()/8)
	for i := 0; i < p.Bits(); i++ {
		m[i/8] |= 0x80 >> (i % 8)
	}
	return m
}

func lastAddr(p netip.Prefix) []byte {
	a := p.Addr().AsSlice()
	for i := p.Bits(); i < len(a)*8; i++ {
		a[i/8] |= 0x80 >> (i % 8)
	}
	return a
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
