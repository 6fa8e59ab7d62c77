// Package gitref is the one home of the rules for the names and ids git
// stores: ref names, branch and tag names, and object ids. The push path
// (hooks), the REST API, repository creation (repo) and the database
// (store) all ask this package, so a name one of them accepts is a name
// every other accepts.
//
// A ref name must pass git check-ref-format (see git-check-ref-format(1);
// git would refuse the others anyway, but later and with messages meant
// for git users) and Sluice's own rules, which git allows but which make a
// name dangerous or ambiguous somewhere downstream:
//
//   - it lies under refs/ (a push to "HEAD" or "main" is not a ref update
//     Sluice records);
//   - it is valid UTF-8 without control characters, C1 controls included:
//     names are shown in the web UI, e-mail and JSON, and a name that is
//     not text cannot be shown faithfully or compared reliably;
//   - no component begins with '-': refs/heads/--output=x turns into an
//     option the moment some tool puts its short name on a command line;
//   - no component is "@": "@" alone means HEAD in revision syntax, so
//     refs/heads/@ would be a branch "@" that `git checkout @` cannot name;
//   - refs/heads/HEAD and refs/tags/HEAD are refused: their short name
//     "HEAD" means the repository's HEAD to every git command, so such a
//     branch can be pushed but never checked out, merged or deleted by its
//     short name;
//   - it is at most MaxRefNameLen bytes.
//
// The rules are deliberately a superset of git's: git 2.39 accepts every
// name this package accepts (a test asks git check-ref-format about each
// case).
package gitref

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/sluice-scm/sluice/internal/problem"
)

// MaxRefNameLen caps a full ref name. Git has no limit of its own; a loose
// ref is a file, and 1024 bytes keeps it well inside PATH_MAX (4096) with
// room for the repository's own path, and keeps log lines sane.
const MaxRefNameLen = 1024

// Prefixes of the two namespaces users name by short name.
const (
	BranchPrefix = "refs/heads/"
	TagPrefix    = "refs/tags/"
)

// CheckRefName returns a problem.Invalid error naming the broken rule when
// name (a full ref name such as "refs/heads/main") is not one Sluice
// accepts.
func CheckRefName(name string) error {
	if reason := refNameProblem(name); reason != "" {
		return problem.New(problem.Invalid, "invalid ref name %s: %s", quoteShort(name), reason)
	}
	return nil
}

// CheckBranchName checks a short branch name ("main", "feature/x"), the
// part after refs/heads/, by the same rules as CheckRefName.
func CheckBranchName(name string) error {
	return checkShort("branch name", BranchPrefix, name)
}

// CheckTagName checks a short tag name ("v1.0"), the part after refs/tags/.
func CheckTagName(name string) error {
	return checkShort("tag name", TagPrefix, name)
}

func checkShort(field, prefix, name string) error {
	if name == "" {
		return problem.New(problem.Invalid, "%s must not be empty", field)
	}
	if reason := refNameProblem(prefix + name); reason != "" {
		return problem.New(problem.Invalid, "%s %s: %s", field, quoteShort(name), reason)
	}
	return nil
}

// ValidRefName reports whether CheckRefName accepts name.
func ValidRefName(name string) bool { return refNameProblem(name) == "" }

// refNameProblem returns why name is refused, or "" when it is accepted.
// The order puts the rules a user most likely broke first, so the message
// names the mistake rather than a consequence of it.
func refNameProblem(name string) string {
	switch {
	case !strings.HasPrefix(name, "refs/"):
		return "not under refs/"
	case len(name) > MaxRefNameLen:
		return fmt.Sprintf("longer than %d bytes", MaxRefNameLen)
	case !utf8.ValidString(name):
		return "not valid UTF-8"
	case strings.HasSuffix(name, "/"):
		return "ends with '/'"
	case strings.HasSuffix(name, "."):
		return "ends with '.'"
	case strings.Contains(name, ".."):
		return "contains '..'"
	case strings.Contains(name, "@{"):
		return "contains '@{'"
	}
	for _, r := range name {
		switch {
		case r < 0x20 || r == 0x7f || unicode.IsControl(r):
			return "contains a control character"
		case strings.ContainsRune(" ~^:?*[\\", r):
			return fmt.Sprintf("contains %q", r)
		}
	}
	for comp := range strings.SplitSeq(name, "/") {
		switch {
		case comp == "":
			return "has an empty path component"
		case strings.HasPrefix(comp, "."):
			return "has a path component beginning with '.'"
		case strings.HasPrefix(comp, "-"):
			return "has a path component beginning with '-'"
		case strings.HasSuffix(comp, ".lock"):
			return "has a path component ending with '.lock'"
		case comp == "@":
			return "has a path component '@' (git reads \"@\" as HEAD)"
		}
	}
	if name == BranchPrefix+"HEAD" || name == TagPrefix+"HEAD" {
		return "its short name \"HEAD\" means the repository's HEAD"
	}
	return ""
}

// quoteShort quotes v for a message, cut to keep messages short when v is
// an attack or a mistake of megabytes. %q escapes control characters and
// invalid UTF-8, so the message itself is always printable.
func quoteShort(v string) string {
	const max = 64
	if len(v) <= max {
		return fmt.Sprintf("%q", v)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(v[cut]) {
		cut--
	}
	return fmt.Sprintf("%q…", v[:cut])
}
