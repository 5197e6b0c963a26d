package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
)

// TestGuardedPanic: a panic in a verb, whatever its value, is a CNI error
// with code ErrInternal, the panic's first line and the panicking frame;
// a verb that returns is untouched.
func TestGuardedPanic(t *testing.T) {
	var nilMap map[string]*skel.CmdArgs
	for _, tc := range []struct {
		name string
		verb func(*skel.CmdArgs) error
		msg  string
	}{
		{"nil dereference", func(*skel.CmdArgs) error { return errors.New(nilMap["x"].Netns) },
			"internal error: runtime error: invalid memory address or nil pointer dereference"},
		{"multi-line value", func(*skel.CmdArgs) error { panic("first line\nsecond line") }, "internal error: first line"},
		{"error value", func(*skel.CmdArgs) error { panic(errors.New("boom")) }, "internal error: boom"},
		{"nil value", func(*skel.CmdArgs) error { panic(nil) }, "internal error: panic called with nil argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := guarded(tc.verb)(&skel.CmdArgs{})
			var e *types.Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v, want a CNI error", err)
			}
			if e.Code != ErrInternal || e.Msg != tc.msg {
				t.Errorf("got code %d %q, want code %d %q", e.Code, e.Msg, ErrInternal, tc.msg)
			}
			if !strings.Contains(e.Details, "TestGuardedPanic") {
				t.Errorf("details %q do not name the panicking function", e.Details)
			}
		})
	}
	want := errors.New("plain failure")
	if err := guarded(func(*skel.CmdArgs) error { return want })(&skel.CmdArgs{}); err != want { //nolint:errorlint // the very error, unwrapped
		t.Errorf("a returned error came back as %v", err)
	}
	if err := guarded(func(*skel.CmdArgs) error { return nil })(&skel.CmdArgs{}); err != nil {
		t.Errorf("success came back as %v", err)
	}
}
