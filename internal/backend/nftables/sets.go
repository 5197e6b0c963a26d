package nftables

import (
	"bytes"
	"fmt"
	"net/netip"
	"sort"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"

	"github.com/mesh-cni/mesh-cni/internal/rules"
)

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
