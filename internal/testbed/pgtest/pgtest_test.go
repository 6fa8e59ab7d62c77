package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

func TestPostgresURLFreshDatabase(t *testing.T) {
	ctx := context.Background()
	var names [2]string
	for i := range names {
		u := URL(t)
		conn, err := pgx.Connect(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&names[i]); err != nil {
			t.Fatal(err)
		}
		// A table created in one database must not be visible in the next.
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 'marker'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("database %s is not fresh: marker table exists", names[i])
		}
		if _, err := conn.Exec(ctx, "CREATE TABLE marker (x int)"); err != nil {
			t.Fatal(err)
		}
		conn.Close(ctx)
	}
	if names[0] == names[1] {
		t.Fatalf("two calls returned the same database %q", names[0])
	}
}

func TestPostgresURLDropsDatabase(t *testing.T) {
	var name string
	t.Run("inner", func(t *testing.T) {
		conn, err := pgx.Connect(context.Background(), URL(t))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if err := conn.QueryRow(context.Background(), "SELECT current_database()").Scan(&name); err != nil {
			t.Fatal(err)
		}
	})
	pg.mu.Lock()
	admin, skip := pg.adminURL, pg.skip
	pg.mu.Unlock()
	if skip != "" {
		t.Skip(skip)
	}
	conn, err := pgx.Connect(context.Background(), admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("database %s still exists after its test ended", name)
	}
}
