package main

import (
	"fmt"
	"runtime"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
)

// guarded turns a panic in a verb into a CNI error, code ErrInternal with
// the panic's first line and the frame it came from, so the runtime gets a
// result it can act on and log instead of a Go stack trace. The verb's own
// deferred work (the report to the agent) has run by then. A panic in
// another goroutine cannot be caught here and still ends the process.
func guarded(verb func(*skel.CmdArgs) error) func(*skel.CmdArgs) error {
	return func(args *skel.CmdArgs) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = internalError(r, panicSite())
			}
		}()
		return verb(args)
	}
}

// internalError is the CNI error for a recovered panic value.
func internalError(r any, site string) *types.Error {
	msg, _, _ := strings.Cut(fmt.Sprint(r), "\n")
	return types.NewError(ErrInternal, "internal error: "+msg, site)
}

// panicSite names the function and line that panicked: the first frame
// outside the runtime above the deferred call.
func panicSite() string {
	pcs := make([]uintptr, 32)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs)])
	for {
		f, more := frames.Next()
		if !strings.HasPrefix(f.Function, "runtime.") {
			return fmt.Sprintf("%s (%s:%d)", f.Function, f.File, f.Line)
		}
		if !more {
			return ""
		}
	}
}
