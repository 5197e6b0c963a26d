// Package version is the build version, set with -ldflags at build time.
package version

// Version is overwritten by the Makefile's -X flag.
var Version = "v0.1.0-dev"
