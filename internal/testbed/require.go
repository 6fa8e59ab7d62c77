package testbed

import (
	"os"
	"testing"
)

// Missing reports a component a test needs and cannot find. Under CI
// (CI=true, as CI sets it) the test fails: CI installs every component, and
// a silently skipped test proves nothing. Elsewhere it skips with what to
// install, so `make test` on a developer's machine runs everything it can.
func Missing(t testing.TB, component, install string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is not installed (%s); CI must install it", component, install)
	}
	t.Skipf("%s is not installed; install it to run this test: %s", component, install)
}

// skipShort skips a test that starts a node or a cluster under -short:
// `make test-short` is the unit tier, and every in-process node is an
// integration test.
func skipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: starts a node (integration tier)")
	}
}
