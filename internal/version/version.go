// Package version is the build's version and commit, set with -ldflags at
// build time (the Makefile and hack/release.sh pass both):
//
//	-X github.com/mesh-cni/mesh-cni/internal/version.Version=v0.2.0
//	-X github.com/mesh-cni/mesh-cni/internal/version.Commit=<git commit>
package version

import "runtime/debug"

// Version is the release, from the VERSION file.
var Version = "v0.2.0-dev"

// Commit is the git commit the binary was built from ("-dirty" appended when
// the tree had changes). Empty when not stamped: then the Go toolchain's own
// VCS stamp is used if the build had one, else "unknown".
var Commit = ""

// GetCommit returns Commit, or the toolchain's vcs.revision, or "unknown".
func GetCommit() string {
	if Commit != "" {
		return Commit
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			if dirty {
				rev += "-dirty"
			}
			return rev
		}
	}
	return "unknown"
}

// String is what the commands' version subcommands print after their name:
// "v0.2.0 (commit 0123abcd)".
func String() string {
	return Version + " (commit " + GetCommit() + ")"
}
