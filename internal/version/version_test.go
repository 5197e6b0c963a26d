package version

import "testing"

func TestString(t *testing.T) {
	defer func(v, c string) { Version, Commit = v, c }(Version, Commit)
	Version, Commit = "v1.2.3", "0123456789ab"
	if got, want := String(), "v1.2.3 (commit 0123456789ab)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	// Not stamped: a test binary has no VCS stamp, so "unknown", never "".
	Commit = ""
	if got := GetCommit(); got == "" {
		t.Error("GetCommit() is empty when not stamped")
	}
}
