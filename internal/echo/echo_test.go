package echo

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestClip(t *testing.T) {
	if got := Clip("short"); got != "short" {
		t.Errorf("Clip(short) = %q", got)
	}
	long := strings.Repeat("é", Max) // 2 bytes each: the cut falls inside one
	got := Clip(long)
	if !strings.HasSuffix(got, "bytes cut]") || len(got) > Max+32 || !utf8.ValidString(got) {
		t.Errorf("Clip of %d bytes = %q (%d bytes)", len(long), got, len(got))
	}
}
