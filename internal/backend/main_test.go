package backend_test

import (
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// TestMain removes the test proxy the netns tests build.
func TestMain(m *testing.M) { testenv.Main(m) }
