package pgserver

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestCreateDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	s, err := Start(Options{MaxConnections: 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u, err := s.CreateDatabase(ctx, "sluice-e3")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(u, "/sluice-e3?") {
		t.Fatalf("url %q does not name the database", u)
	}
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	var db string
	err = conn.QueryRow(ctx, "SELECT current_database()").Scan(&db)
	conn.Close(ctx)
	if err != nil || db != "sluice-e3" {
		t.Fatalf("connected to %q (%v), want sluice-e3", db, err)
	}
	if pid, err := s.Pid(); err != nil || pid <= 1 {
		t.Fatalf("postmaster pid %d, %v", pid, err)
	} else if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
		t.Fatalf("postmaster %d not running: %v", pid, err)
	}
	if _, err := s.CreateDatabase(ctx, "sluice-e3"); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("second create: %v, want already exists", err)
	}
}
