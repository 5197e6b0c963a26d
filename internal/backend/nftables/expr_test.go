package nftables

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/google/nftables"
)

func TestIntervals(t *testing.T) {
	b := func(v ...byte) []byte { return v }
	got := intervals([][2][]byte{
		{b(10, 0), b(10, 255)},
		{b(1, 0), b(1, 0)},
		{b(10, 128), b(11, 5)}, // overlaps the first
		{b(11, 6), b(11, 6)},   // adjacent: merged
		{b(255, 0), b(255, 255)},
	})
	want := []nftables.SetElement{
		{Key: b(1, 0)}, {Key: b(1, 1), IntervalEnd: true},
		{Key: b(10, 0)}, {Key: b(11, 7), IntervalEnd: true},
		{Key: b(255, 0)}, // runs to the top: no end element
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("intervals:\n got %v\nwant %v", got, want)
	}
}

func TestPrefixBytes(t *testing.T) {
	p := netip.MustParsePrefix("198.18.0.0/15")
	if got := prefixMask(p); !reflect.DeepEqual(got, []byte{255, 254, 0, 0}) {
		t.Errorf("mask %v", got)
	}
	if got := lastAddr(p); !reflect.DeepEqual(got, []byte{198, 19, 255, 255}) {
		t.Errorf("last %v", got)
	}
}
