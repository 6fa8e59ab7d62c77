package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sluice-scm/sluice/internal/problem"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// isUnique reports a unique or primary key violation.
func isUnique(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
	}
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// isForeignKey reports a foreign key violation: a referenced row is missing
// (insert) or still referenced (delete with RESTRICT).
func isForeignKey(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code() == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY
	}
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23503"
}

// isUnavailable reports errors that say "the database cannot serve you now"
// rather than "your request is wrong": lost connections, a server that is
// shutting down or full, an SQLite writer that held the lock past the busy
// timeout.
func isUnavailable(err error) bool {
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return true
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_FULL:
			return true
		}
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// Class 08: connection exception; 53: insufficient resources;
		// 57P0x: the server is shutting down or starting.
		return strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "53") ||
			pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03"
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	// A caller's own deadline or cancellation is not the database's
	// fault; only network-level failures below are.
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne)
}

// fail turns a database error that no method-specific rule matched into the
// error to return: Unavailable for connection trouble, otherwise the error
// annotated with what was being done (Internal for the user).
func (d *DB) fail(err error, op string) error {
	if err == nil {
		return nil
	}
	var pe *problem.Error
	if errors.As(err, &pe) {
		return err
	}
	if isUnavailable(err) {
		d.ConnectionsSuspect()
		return problem.Wrap(problem.Unavailable, fmt.Errorf("%s: %w", op, err), "database unavailable")
	}
	return fmt.Errorf("%s: %w", op, err)
}

// notFound maps sql.ErrNoRows to NotFound with msg, anything else through fail.
func (d *DB) notFound(err error, op, msg string) error {
	if errors.Is(err, sql.ErrNoRows) {
		return problem.New(problem.NotFound, "%s", msg)
	}
	return d.fail(err, op)
}

// mustAffect turns "no row changed" into NotFound with msg.
func (d *DB) mustAffect(res sql.Result, err error, op, msg string) error {
	if err != nil {
		return d.fail(err, op)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return d.fail(err, op)
	}
	if n == 0 {
		return problem.New(problem.NotFound, "%s", msg)
	}
	return nil
}
