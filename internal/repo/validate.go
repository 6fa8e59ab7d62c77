package repo

import (
	"strings"

	"github.com/sluice-scm/sluice/internal/gitref"
	"github.com/sluice-scm/sluice/internal/problem"
)

// Limits on user-supplied names. Git itself has none; these keep requests,
// log lines and filesystem paths of a sane size.
const (
	maxRevLen    = gitref.MaxRefNameLen
	maxPathLen   = 4096 // PATH_MAX on Linux
	maxPrefixLen = 255
)

// ValidateRefName checks a full ref name ("refs/heads/main"). The rules
// live in gitref, shared with the push path and the store.
func ValidateRefName(name string) error { return gitref.CheckRefName(name) }

// ValidateBranchName checks a short branch name ("main", "feature/x"), the
// part after refs/heads/, by gitref's rules; the REST API, the web UI and
// pull requests reach them through here.
func ValidateBranchName(name string) error { return gitref.CheckBranchName(name) }

func validRefName(name string) bool { return gitref.ValidRefName(name) }

// validRev accepts what the read helpers let a user name a commit by: an
// abbreviated or full object id, "HEAD", or a ref name in full
// ("refs/heads/x") or short ("x", "feature/y") form. Revision syntax (x~2,
// x^{tree}, x@{1}, a..b, :/text) is refused: the API has its own parameters
// for ranges, and revision syntax can reach objects outside the repository's
// own refs.
func validRev(rev string) bool {
	if rev == "" || len(rev) > maxRevLen {
		return false
	}
	if rev == "HEAD" || isHex(rev, 4, 64) {
		return true
	}
	if strings.HasPrefix(rev, "refs/") {
		return validRefName(rev)
	}
	return validRefName("refs/heads/" + rev)
}

func checkRev(rev string) error {
	if !validRev(rev) {
		return problem.New(problem.Invalid, "invalid revision %q", rev)
	}
	return nil
}

// validOID accepts a full SHA-1 or SHA-256 object id in lower case.
func validOID(s string) bool { return gitref.ValidObjectID(s) }

func isHex(s string, minLen, maxLen int) bool {
	if len(s) < minLen || len(s) > maxLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// cleanPath validates a repository-relative path from a user and returns it
// without a trailing slash; "" (and "/") mean the root. Paths are tree
// paths, never filesystem paths, but they still must not climb ("..") or
// smuggle separators git would read differently (NUL, newline in
// cat-file's line protocol).
func cleanPath(p string) (string, error) {
	if p == "/" {
		return "", nil
	}
	p = strings.TrimSuffix(p, "/")
	if p == "" {
		return "", nil
	}
	if len(p) > maxPathLen || strings.HasPrefix(p, "/") || strings.ContainsAny(p, "\x00\r\n") {
		return "", problem.New(problem.Invalid, "invalid path %q", p)
	}
	for comp := range strings.SplitSeq(p, "/") {
		if comp == "" || comp == "." || comp == ".." {
			return "", problem.New(problem.Invalid, "invalid path %q", p)
		}
	}
	return p, nil
}

// cleanPrefix validates an archive prefix and makes it end in "/". The
// prefix becomes the leading directory of every archive entry, so it must
// be relative, must not climb, and must not hold bytes an unpacker could
// misread.
func cleanPrefix(p string) (string, error) {
	if p == "" {
		return "", nil
	}
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	bad := len(p) > maxPrefixLen || strings.HasPrefix(p, "/") || strings.HasPrefix(p, "-") || strings.Contains(p, "\\")
	for i := 0; i < len(p) && !bad; i++ {
		if p[i] < 0x20 || p[i] == 0x7f {
			bad = true
		}
	}
	if !bad {
		for comp := range strings.SplitSeq(strings.TrimSuffix(p, "/"), "/") {
			if comp == "" || comp == "." || comp == ".." {
				bad = true
			}
		}
	}
	if bad {
		return "", problem.New(problem.Invalid, "invalid archive prefix %q", p)
	}
	return p, nil
}
