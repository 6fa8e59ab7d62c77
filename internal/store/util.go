package store

import (
	"database/sql"
	"strings"
	"time"
)

// Paging limits: 25 is Bitbucket's default page size; 1000 bounds what one
// request can make the database return.
const (
	DefaultPageLimit = 25
	MaxPageLimit     = 1000
)

// Bounds returns the LIMIT and OFFSET p asks for, after defaults and caps.
func (p Page) Bounds() (limit, offset int) {
	limit = p.Limit
	if limit <= 0 {
		limit = DefaultPageLimit
	}
	limit = min(limit, MaxPageLimit)
	return limit, max(p.Start, 0)
}

// now is the current time as stored: UTC, at the microsecond precision
// PostgreSQL keeps, so that a value written and read back compares equal.
func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

func dbTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// nullID stores 0 as NULL: ids start at 1 in both dialects.
func nullID(id int64) any {
	if id == 0 {
		return nil
	}
	return id
}

func nullTimePtr(t *time.Time) any {
	if t == nil {
		return nil
	}
	return dbTime(*t)
}

func timePtr(n sql.NullTime) *time.Time {
	if !n.Valid {
		return nil
	}
	t := n.Time.UTC()
	return &t
}

func timeVal(n sql.NullTime) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return n.Time.UTC()
}

// likeContains is a LIKE pattern (used with ESCAPE '\') matching values
// that contain filter, compared in lower case on both sides.
func likeContains(filter string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return "%" + r.Replace(strings.ToLower(filter)) + "%"
}

// foldName is the case-folded form unique user and group names are
// compared by. Folding in Go rather than with lower() keeps both dialects
// in agreement beyond ASCII.
func foldName(s string) string { return strings.ToLower(s) }
