package cli

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine started by them is
// still running once they have all finished.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
