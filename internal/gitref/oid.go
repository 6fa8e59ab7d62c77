package gitref

import (
	"strings"

	"github.com/sluice-scm/sluice/internal/problem"
)

// Object id lengths in hex: SHA-1 and SHA-256 repositories.
const (
	SHA1HexLen   = 40
	SHA256HexLen = 64
)

// ObjectID is a full object id in lower-case hex, as git prints it. Only
// ParseObjectID and Zero make one, so a value of this type has been
// validated.
type ObjectID string

// ParseObjectID accepts a full SHA-1 or SHA-256 object id in lower-case
// hex. Upper case is refused rather than folded: git always prints lower
// case, and two spellings of one id would make two cache keys or two
// database rows.
func ParseObjectID(s string) (ObjectID, error) {
	if !ValidObjectID(s) {
		return "", problem.New(problem.Invalid, "invalid object id %s", quoteShort(s))
	}
	return ObjectID(s), nil
}

// ValidObjectID reports whether ParseObjectID accepts s.
func ValidObjectID(s string) bool {
	if len(s) != SHA1HexLen && len(s) != SHA256HexLen {
		return false
	}
	return isLowerHex(s)
}

// Zero is the all-zero object id of hexLen digits, which git uses for "no
// object" (the old side of a ref creation, the new side of a deletion).
func Zero(hexLen int) ObjectID { return ObjectID(strings.Repeat("0", hexLen)) }

// IsZero reports whether id is the all-zero id of either length.
func (id ObjectID) IsZero() bool {
	return (len(id) == SHA1HexLen || len(id) == SHA256HexLen) && strings.Trim(string(id), "0") == ""
}

// String returns the hex form.
func (id ObjectID) String() string { return string(id) }

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
