package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sluice-scm/sluice/internal/problem"
)

func TestErrorClassification(t *testing.T) {
	d := &DB{dialect: "postgres"}
	tests := []struct {
		err    error
		kind   problem.Kind
		unique bool
		fk     bool
	}{
		{&pgconn.PgError{Code: "23505"}, problem.Internal, true, false},
		{&pgconn.PgError{Code: "23503"}, problem.Internal, false, true},
		{&pgconn.PgError{Code: "42601"}, problem.Internal, false, false}, // syntax error: our bug
		{&pgconn.PgError{Code: "57P01"}, problem.Unavailable, false, false},
		{&pgconn.PgError{Code: "08006"}, problem.Unavailable, false, false},
		{&pgconn.PgError{Code: "53300"}, problem.Unavailable, false, false},
		{fmt.Errorf("query: %w", driver.ErrBadConn), problem.Unavailable, false, false},
		{sql.ErrConnDone, problem.Unavailable, false, false},
		{io.ErrUnexpectedEOF, problem.Unavailable, false, false},
		{context.Canceled, problem.Internal, false, false},
		{errors.New("boom"), problem.Internal, false, false},
		{problem.New(problem.NotFound, "user not found"), problem.NotFound, false, false},
	}
	for _, tc := range tests {
		if got := isUnique(tc.err); got != tc.unique {
			t.Errorf("isUnique(%v) = %v", tc.err, got)
		}
		if got := isForeignKey(tc.err); got != tc.fk {
			t.Errorf("isForeignKey(%v) = %v", tc.err, got)
		}
		err := d.fail(tc.err, "op")
		if got := problem.KindOf(err); got != tc.kind {
			t.Errorf("fail(%v) kind = %v, want %v", tc.err, got, tc.kind)
		}
		if !errors.Is(err, tc.err) {
			t.Errorf("fail(%v) lost the cause: %v", tc.err, err)
		}
		if tc.kind == problem.Unavailable && problem.Message(err) != "database unavailable" {
			t.Errorf("fail(%v) message = %q", tc.err, problem.Message(err))
		}
	}
	if d.fail(nil, "op") != nil {
		t.Error("fail(nil) != nil")
	}
	if err := d.notFound(sql.ErrNoRows, "op", "repository not found"); !problem.Is(err, problem.NotFound) || problem.Message(err) != "repository not found" {
		t.Errorf("notFound(ErrNoRows) = %v", err)
	}
}

func TestMigrateLockKey(t *testing.T) {
	sum := sha256.Sum256([]byte("sluice/store/migrate"))
	if got := int64(binary.BigEndian.Uint64(sum[:8])); got != migrateLockKey {
		t.Errorf("migrateLockKey = %#x, its documented derivation gives %#x", migrateLockKey, got)
	}
}
