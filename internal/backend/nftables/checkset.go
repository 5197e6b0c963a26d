package nftables

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"

	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// span is an inclusive range of set keys.
type span struct{ first, last []byte }

// kernelSets reads the sets of our table as Check needs them: the list
// once, the elements of each set the rules look up.
type kernelSets struct {
	conn   *nftables.Conn
	byName map[string]*nftables.Set
}

func (k *kernelSets) spans(name string) ([]span, error) {
	if k.byName == nil {
		ss, err := k.conn.GetSets(table)
		if err != nil {
			return nil, fmt.Errorf("list nftables sets: %w", err)
		}
		k.byName = make(map[string]*nftables.Set, len(ss))
		for _, s := range ss {
			k.byName[s.Name] = s
		}
	}
	s := k.byName[name]
	if s == nil {
		return nil, fmt.Errorf("set %s is missing", name)
	}
	es, err := k.conn.GetSetElements(s)
	if err != nil {
		return nil, fmt.Errorf("list elements of set %s: %w", name, err)
	}
	return spans(es, s.Interval), nil
}

// checkSets compares the sets the kernel's rule exprs look up with want,
// the elements of the expected rule's sets in the same order (the rules'
// signatures are equal, so are their lookups).
func checkSets(k *kernelSets, exprs []expr.Any, want [][]nftables.SetElement) error {
	n := 0
	for i, e := range exprs {
		l, ok := e.(*expr.Lookup)
		if !ok {
			continue
		}
		if n >= len(want) {
			return fmt.Errorf("looks up more sets than the %d wanted", len(want))
		}
		have, err := k.spans(l.SetName)
		if err != nil {
			return err
		}
		if err := diffSpans(have, spans(want[n], true)); err != nil {
			var load expr.Any
			if i > 0 {
				load = exprs[i-1]
			}
			return fmt.Errorf("the set of its %s %w", field(load), err)
		}
		n++
	}
	return nil
}

// spans turns set elements into sorted inclusive ranges, adjacent ones
// merged. In an interval set a start element opens a range that the next
// end element (the key one past it) closes, and one left open runs to the
// top of the key space; this is how the kernel's lookup reads them, so an
// end element with nothing open (nft writes one at zero) adds nothing. It
// sorts es in place.
func spans(es []nftables.SetElement, interval bool) []span {
	slices.SortFunc(es, func(a, b nftables.SetElement) int {
		if c := bytes.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		switch {
		case a.IntervalEnd == b.IntervalEnd:
			return 0
		case a.IntervalEnd:
			return -1
		}
		return 1
	})
	out := make([]span, 0, len(es)/2+1)
	var open []byte
	for _, e := range es {
		switch {
		case !interval:
			out = append(out, span{e.Key, e.Key})
		case e.KeyEnd != nil: // a range in one element, as pipapo sets hold them
			out = append(out, span{e.Key, e.KeyEnd})
		case e.IntervalEnd:
			if open != nil {
				if last, ok := prev(e.Key); ok {
					out = append(out, span{open, last})
				}
				open = nil
			}
		case open == nil:
			open = e.Key
		}
	}
	if open != nil {
		out = append(out, span{open, bytes.Repeat([]byte{0xff}, len(open))})
	}
	return merge(out)
}

// merge joins, in place, overlapping and adjacent spans of a list sorted
// by start.
func merge(ss []span) []span {
	out := ss[:0]
	for _, s := range ss {
		if n := len(out); n > 0 {
			last := &out[n-1]
			end, ok := next(last.last)
			if !ok || bytes.Compare(s.first, end) <= 0 {
				if bytes.Compare(s.last, last.last) > 0 {
					last.last = s.last
				}
				continue
			}
		}
		out = append(out, s)
	}
	return out
}

// prev returns b-1 as a big-endian number; ok is false below zero.
func prev(b []byte) ([]byte, bool) {
	out := append([]byte(nil), b...)
	for i := len(out) - 1; i >= 0; i-- {
		out[i]--
		if out[i] != 0xff {
			return out, true
		}
	}
	return nil, false
}

// diffSpans names the ranges of want the set lacks and those it holds
// beyond want.
func diffSpans(have, want []span) error {
	if slices.EqualFunc(have, want, func(a, b span) bool {
		return bytes.Equal(a.first, b.first) && bytes.Equal(a.last, b.last)
	}) {
		return nil
	}
	key := func(s span) string { return string(s.first) + "\x00" + string(s.last) }
	in := func(ss []span) map[string]bool {
		m := make(map[string]bool, len(ss))
		for _, s := range ss {
			m[key(s)] = true
		}
		return m
	}
	haveSet, wantSet := in(have), in(want)
	var missing, extra []string
	for _, s := range want {
		if !haveSet[key(s)] {
			missing = append(missing, s.String())
		}
	}
	for _, s := range have {
		if !wantSet[key(s)] {
			extra = append(extra, s.String())
		}
	}
	var parts []string
	if len(missing) > 0 {
		parts = append(parts, "lacks "+list(missing))
	}
	if len(extra) > 0 {
		parts = append(parts, "has unwanted "+list(extra))
	}
	if len(parts) == 0 {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(parts, " and "))
}

func list(xs []string) string {
	const most = 4
	if len(xs) > most {
		return fmt.Sprintf("%s and %d more", strings.Join(xs[:most], ", "), len(xs)-most)
	}
	return strings.Join(xs, ", ")
}

// String shows a port or port range, an address, prefix or address range.
func (s span) String() string {
	switch len(s.first) {
	case 2:
		f, l := binaryutil.BigEndian.Uint16(s.first), binaryutil.BigEndian.Uint16(s.last)
		if f == l {
			return fmt.Sprint(f)
		}
		return fmt.Sprintf("%d-%d", f, l)
	case 4, 16:
		f, _ := netip.AddrFromSlice(s.first)
		l, _ := netip.AddrFromSlice(s.last)
		if f == l {
			return f.String()
		}
		for bits := 0; bits < f.BitLen(); bits++ {
			if p := netip.PrefixFrom(f, bits); p.Masked().Addr() == f && bytes.Equal(lastAddr(p), s.last) {
				return p.String()
			}
		}
		return f.String() + "-" + l.String()
	}
	if bytes.Equal(s.first, s.last) {
		return fmt.Sprintf("%x", s.first)
	}
	return fmt.Sprintf("%x-%x", s.first, s.last)
}

// field names what the payload load before a lookup reads.
func field(load expr.Any) string {
	p, ok := load.(*expr.Payload)
	if !ok {
		return "lookup"
	}
	switch {
	case p.Base == expr.PayloadBaseTransportHeader && p.Offset == 0:
		return "sport"
	case p.Base == expr.PayloadBaseTransportHeader && p.Offset == 2:
		return "dport"
	case p.Base == expr.PayloadBaseNetworkHeader && p.Offset == srcOffset(familyOfLen(p.Len)):
		return "saddr"
	case p.Base == expr.PayloadBaseNetworkHeader && p.Offset == dstOffset(familyOfLen(p.Len)):
		return "daddr"
	}
	return "lookup"
}

func familyOfLen(n uint32) rules.Family {
	if n == 16 {
		return rules.IPv6
	}
	return rules.IPv4
}
