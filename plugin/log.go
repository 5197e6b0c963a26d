package main

import (
	"log/slog"
	"os"

	"github.com/containernetworking/cni/pkg/skel"
)

// newLogger logs JSON lines to stderr, which runtimes keep in their own log;
// stdout belongs to the CNI result.
func newLogger(level, cmd string, args *skel.CmdArgs) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level)) // validated by config.Parse; "info" when unset
	h := slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: l})
	return slog.New(h).With("plugin", "mesh-cni", "cmd", cmd, "container", shortID(args.ContainerID))
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
