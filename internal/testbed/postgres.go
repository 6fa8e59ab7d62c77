package testbed

import (
	"testing"

	"github.com/sluice-scm/sluice/internal/testbed/pgtest"
)

// The throw-away PostgreSQL lives in the leaf package pgtest (see its doc)
// so that packages below app can use it too; these are the names the rest
// of the tests know it by.

// StartPostgres starts the test package's PostgreSQL server (or adopts
// SLUICE_TEST_POSTGRES_URL); call it once from TestMain and stop after
// m.Run.
func StartPostgres() (stop func(), err error) { return pgtest.StartPostgres() }

// MainWithPostgres is a whole TestMain: start PostgreSQL, run the tests,
// stop it, exit; a server that cannot start fails the package.
func MainWithPostgres(m *testing.M) { pgtest.Main(m) }

// PostgresURL creates a fresh database for t and drops it when t ends.
func PostgresURL(t testing.TB) string { return pgtest.URL(t) }
