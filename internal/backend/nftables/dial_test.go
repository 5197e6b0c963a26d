package nftables

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCheckDial: a socket the kernel refuses for want of nfnetlink is
// ErrNoNetlink (so auto falls back and Delete has nothing to remove),
// other failures are plain errors, and a nil connection without an error
// is an error, not a later nil dereference.
func TestCheckDial(t *testing.T) {
	for _, tc := range []struct {
		err       error
		noNetlink bool
	}{
		{unix.EPROTONOSUPPORT, true},
		{unix.EAFNOSUPPORT, true},
		{unix.EMFILE, false},
		{nil, false},
	} {
		c, err := checkDial(nil, tc.err)
		if c != nil || err == nil {
			t.Errorf("%v: got (%v, %v), want an error", tc.err, c, err)
			continue
		}
		if got := errors.Is(err, ErrNoNetlink); got != tc.noNetlink || errors.Is(err, ErrUnsupported) != tc.noNetlink {
			t.Errorf("%v: %q is ErrNoNetlink %v, want %v", tc.err, err, got, tc.noNetlink)
		}
		if tc.err != nil && !errors.Is(err, tc.err) {
			t.Errorf("%q lost %v", err, tc.err)
		}
	}
}
