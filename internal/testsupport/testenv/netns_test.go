package testenv

import (
	"os"
	"testing"

	"github.com/containernetworking/plugins/pkg/testutils"
)

// A netns file held open elsewhere (as a forking parallel test holds it
// between fork and exec) is still unmounted and removed.
func TestRemoveNSWhileHeldOpen(t *testing.T) {
	NeedRoot(t)
	// The premise: testutils.UnmountNS is refused while the file is open.
	probe, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	hp, err := os.Open(probe.Path())
	if err != nil {
		t.Fatal(err)
	}
	if err := testutils.UnmountNS(probe); err == nil {
		t.Error("testutils.UnmountNS removed a netns held open: the premise of this test does not hold")
	}
	hp.Close()
	if err := RemoveNS(probe); err != nil {
		t.Errorf("RemoveNS once no longer held: %v", err)
	}

	n, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	path := n.Path()
	held, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := RemoveNS(n); err != nil {
		t.Fatalf("RemoveNS of a netns held open: %v", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("%s still there after RemoveNS: %v", path, err)
	}
}

// NewNS's netns is gone once the test that made it ends.
func TestNewNSRemovedAtEnd(t *testing.T) {
	var path string
	t.Run("make", func(t *testing.T) {
		path = NewNS(t).Path()
		if _, err := os.Stat(path); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("netns %s still there after its test: %v", path, err)
	}
}
