package hooks

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/sluice-scm/sluice/internal/gitref"
)

// RefUpdate is one "old new ref" line as git hands it to a hook. Old is the
// zero object id for a creation and New is the zero object id for a deletion.
type RefUpdate struct {
	Old, New, Ref string
}

// Created reports whether the update creates Ref.
func (u RefUpdate) Created() bool { return isZeroOID(u.Old) }

// Deleted reports whether the update deletes Ref.
func (u RefUpdate) Deleted() bool { return isZeroOID(u.New) }

func isZeroOID(s string) bool { return strings.Trim(s, "0") == "" }

// ParseUpdates parses hook input: lines of "old SP new SP ref LF". It is
// strict because the input decides which refs the database records: object
// ids must be lower-case hex of one hash length (SHA-1 or SHA-256), the ref
// must be non-empty and free of whitespace, and every line must end in LF.
func ParseUpdates(in []byte) ([]RefUpdate, error) {
	if len(in) == 0 {
		return nil, nil
	}
	if in[len(in)-1] != '\n' {
		return nil, fmt.Errorf("hook input does not end in a newline")
	}
	lines := bytes.Split(in[:len(in)-1], []byte{'\n'})
	updates := make([]RefUpdate, 0, len(lines))
	for i, line := range lines {
		fields := strings.Split(string(line), " ")
		if len(fields) != 3 {
			return nil, fmt.Errorf("hook input line %d: want \"old new ref\"", i+1)
		}
		u := RefUpdate{Old: fields[0], New: fields[1], Ref: fields[2]}
		if !gitref.ValidObjectID(u.Old) || !gitref.ValidObjectID(u.New) || len(u.Old) != len(u.New) {
			return nil, fmt.Errorf("hook input line %d: bad object id", i+1)
		}
		if u.Ref == "" || strings.ContainsFunc(u.Ref, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			return nil, fmt.Errorf("hook input line %d: bad ref name", i+1)
		}
		updates = append(updates, u)
	}
	return updates, nil
}

// CheckRefName returns a problem.Invalid error when name is not a ref Sluice
// accepts from a push. The rules are git check-ref-format's (see
// git-check-ref-format(1)), plus two of our own: the name must be under
// refs/, and no path component may begin with '-'. A ref such as
// refs/heads/--output=x is legal to git but turns into an option the moment
// some tool puts its short name on a command line; refusing it at the door
// is cheaper than proving every later command line safe.
func CheckRefName(name string) error {
	// The rules live in gitref, so the REST API, the store and repository
	// creation accept exactly the names a push does.
	return gitref.CheckRefName(name)
}
