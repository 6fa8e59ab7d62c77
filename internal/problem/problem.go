// Package problem is Sluice's one error vocabulary.
//
// Every error that can reach a user carries a Kind (not found, conflict,
// invalid, forbidden, unauthenticated, throttled, unavailable, too large) and
// a message written for that user. Each transport maps the Kind once: to an
// HTTP status (api, githttp), to a git ERR pkt-line or sideband message
// (githttp, sshd), or to an SSH exit status. The wrapped cause stays in the
// log and is never shown: the line between what a user may see and what the
// operator sees is drawn here, once.
package problem

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
)

// Kind classifies an error for the transports.
type Kind int

const (
	// Internal is anything unexpected; users see a generic message.
	Internal Kind = iota
	NotFound
	Conflict
	Invalid
	Forbidden
	Unauthenticated
	Throttled
	Unavailable
	TooLarge
)

func (k Kind) String() string {
	switch k {
	case NotFound:
		return "not_found"
	case Conflict:
		return "conflict"
	case Invalid:
		return "invalid"
	case Forbidden:
		return "forbidden"
	case Unauthenticated:
		return "unauthenticated"
	case Throttled:
		return "throttled"
	case Unavailable:
		return "unavailable"
	case TooLarge:
		return "too_large"
	default:
		return "internal"
	}
}

// HTTPStatus is the status a REST or git-over-HTTP response uses for k.
func (k Kind) HTTPStatus() int {
	switch k {
	case NotFound:
		return http.StatusNotFound
	case Conflict:
		return http.StatusConflict
	case Invalid:
		return http.StatusBadRequest
	case Forbidden:
		return http.StatusForbidden
	case Unauthenticated:
		return http.StatusUnauthorized
	case Throttled:
		return http.StatusTooManyRequests
	case Unavailable:
		return http.StatusServiceUnavailable
	case TooLarge:
		return http.StatusRequestEntityTooLarge
	default:
		return http.StatusInternalServerError
	}
}

// Error is an error with a Kind and a user-facing message.
type Error struct {
	Kind    Kind
	Message string // safe to show to the user
	Cause   error  // for the log only
	// RetryAfter, in seconds, is set on Throttled and Unavailable errors
	// when the caller knows when trying again makes sense.
	RetryAfter int
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return e.Message + ": " + e.Cause.Error()
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Cause }

// New returns an error of kind k with a user-facing message.
func New(k Kind, format string, args ...any) *Error {
	return &Error{Kind: k, Message: fmt.Sprintf(format, args...)}
}

// Wrap returns an error of kind k whose user-facing message is msg and whose
// cause (kept for the log) is err.
func Wrap(k Kind, err error, msg string) *Error {
	return &Error{Kind: k, Message: msg, Cause: err}
}

// KindOf returns the Kind of the first *Error in err's chain, or Internal.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return Internal
}

// Is reports whether err carries kind k.
func Is(err error, k Kind) bool { return err != nil && KindOf(err) == k }

// Message returns what a user may see of err.
func Message(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "internal server error"
}

// RetryAfter returns the retry hint in seconds carried by err, or 0.
func RetryAfter(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.RetryAfter
	}
	return 0
}

// Size writes a byte count for a message a user reads: with the largest
// binary unit that divides it ("64KiB", "2GiB"), else in bytes. Limits are
// configured in those units, so the message shows the number the
// administrator wrote.
func Size(n int64) string {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10) + " bytes"
}
