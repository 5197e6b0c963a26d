package nftables

import (
	"testing"

	"github.com/google/nftables"
)

// TestSpans: the element lists the kernel hands back for one set, however
// written, give the same ranges as the builder's; different contents give
// different ranges.
func TestSpans(t *testing.T) {
	b := func(v ...byte) []byte { return v }
	start := func(k ...byte) nftables.SetElement { return nftables.SetElement{Key: k} }
	end := func(k ...byte) nftables.SetElement { return nftables.SetElement{Key: k, IntervalEnd: true} }
	// {0x0102, 0x0200-0x02ff, 0xff00-0xffff} as the builder writes it.
	ours := intervals([][2][]byte{{b(1, 2), b(1, 2)}, {b(2, 0), b(2, 255)}, {b(255, 0), b(255, 255)}})
	want := "258, 512-767, 65280-65535"
	for _, tc := range []struct {
		name  string
		es    []nftables.SetElement
		equal bool
	}{
		{"builder", ours, true},
		// nft: an end element at zero, the kernel dumps descending.
		{"nft dump", []nftables.SetElement{start(255, 0), end(3, 0), start(2, 0), end(1, 3), start(1, 2), end(0, 0)}, true},
		// a range split in two adjacent ones means the same
		{"split", []nftables.SetElement{start(1, 2), end(1, 3), start(2, 0), end(2, 128), start(2, 128), end(3, 0), start(255, 0)}, true},
		{"one element, start and end", []nftables.SetElement{{Key: b(1, 2), KeyEnd: b(1, 2)}, {Key: b(2, 0), KeyEnd: b(2, 255)}, {Key: b(255, 0), KeyEnd: b(255, 255)}}, true},
		{"top closed", []nftables.SetElement{start(1, 2), end(1, 3), start(2, 0), end(3, 0), start(255, 0), end(255, 255)}, false},
		{"port changed", []nftables.SetElement{start(1, 3), end(1, 4), start(2, 0), end(3, 0), start(255, 0)}, false},
		{"element removed", []nftables.SetElement{start(2, 0), end(3, 0), start(255, 0)}, false},
	} {
		got := spans(tc.es, true)
		if err := diffSpans(got, spans(ours, true)); (err == nil) != tc.equal {
			t.Errorf("%s: %v (%v), want equal %t", tc.name, err, got, tc.equal)
		}
		if tc.equal && fmtSpans(got) != want {
			t.Errorf("%s: %s, want %s", tc.name, fmtSpans(got), want)
		}
	}
	if got := fmtSpans(spans([]nftables.SetElement{start(1, 2), start(0, 7)}, false)); got != "7, 258" {
		t.Errorf("plain set: %s, want 7, 258", got)
	}
}

func fmtSpans(ss []span) string {
	var s string
	for i, x := range ss {
		if i > 0 {
			s += ", "
		}
		s += x.String()
	}
	return s
}

func TestSpanString(t *testing.T) {
	for _, tc := range []struct {
		first, last []byte
		want        string
	}{
		{[]byte{10, 0, 0, 0}, []byte{10, 255, 255, 255}, "10.0.0.0/8"},
		{[]byte{10, 0, 0, 1}, []byte{10, 0, 0, 1}, "10.0.0.1"},
		{[]byte{10, 0, 0, 1}, []byte{10, 0, 0, 2}, "10.0.0.1-10.0.0.2"},
		{append([]byte{0x20, 0x01, 0x0d, 0xb8}, make([]byte, 12)...), append([]byte{0x20, 0x01, 0x0d, 0xb8}, bytesOf(0xff, 12)...), "2001:db8::/32"},
		{[]byte{0x23, 0x82}, []byte{0x23, 0x82}, "9090"},
		{[]byte{1, 2, 3}, []byte{1, 2, 4}, "010203-010204"},
	} {
		if got := (span{tc.first, tc.last}).String(); got != tc.want {
			t.Errorf("%x-%x: %s, want %s", tc.first, tc.last, got, tc.want)
		}
	}
}

func bytesOf(v byte, n int) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = v
	}
	return out
}
