package main

import (
	"fmt"

	"github.com/containernetworking/cni/pkg/types"
)

// Plugin-specific CNI error codes (the spec reserves 100 and up).
const (
	// ErrApply: the pod's rules could not be programmed; the netns holds
	// none of them.
	ErrApply uint = 100
	// ErrRulesMissing: CHECK found the pod's rules missing or changed.
	ErrRulesMissing uint = 101
	// ErrInternal: a verb panicked (guarded); the message is the panic's
	// first line. The spec's generic code, types.ErrInternal.
	ErrInternal = types.ErrInternal
)

func cniErr(code uint, format string, a ...any) *types.Error {
	return types.NewError(code, fmt.Sprintf(format, a...), "")
}
