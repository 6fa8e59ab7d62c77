package store

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/sluice-scm/sluice/internal/gitref"
	"github.com/sluice-scm/sluice/internal/problem"
)

// Name rules. Every name a user picks passes one of these before it is
// stored. None of them ever becomes a path (repositories live under their
// id) or a git option, but names do end up in URLs, clone commands, log
// lines and shell prompts, so they are kept boring:
//
//   - never empty, never longer than the cap (128 for project keys and
//     slugs, which sit in every clone URL as Bitbucket caps them; 255 for
//     names, a common column size in the tools people migrate from);
//   - no control character at all (NUL, CR and LF forge log lines and
//     pkt-lines), no '/', '\\' or '%' (no path or percent-encoding games),
//     no ".." anywhere, no leading '-' (option injection in scripts that
//     pass names to other tools);
//   - "." and ".." are never names, and slugs may not end in ".git": the
//     transports strip one ".git" from /scm/KEY/slug.git, so "x.git" and
//     "x" would be ambiguous.
//
// User names are not checked against a list of reserved words: "admin"
// is the usual first account. Project keys need none either: the key
// grammar (a letter, then letters, digits and '_') cannot spell a path
// trick, and no URL space puts a key next to a fixed word it could shadow.

const (
	maxKeyLen  = 128
	maxNameLen = 255
)

// reservedSlugs are words slugs may not be, beyond "." and "..": they are
// path segments of the web UI and REST routes under a repository's URL
// prefix, and "HEAD"-like names confuse humans reading clone URLs.
var reservedSlugs = map[string]bool{
	"rest": true, "scm": true, "api": true, "admin": true,
	"head": true, "info": true, "objects": true, "refs": true,
}

func invalid(field, v, rule string) error {
	return problem.New(problem.Invalid, "%s %s: %s", field, quoteShort(v), rule)
}

// quoteShort quotes v for a message, cut to keep messages short when v is
// an attack or a mistake of megabytes.
func quoteShort(v string) string {
	const max = 64
	if len(v) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(v[cut]) {
			cut--
		}
		return fmt.Sprintf("%q…", v[:cut])
	}
	return fmt.Sprintf("%q", v)
}

// checkCommon applies the rules every name shares.
func checkCommon(field, v string, maxLen int) error {
	switch {
	case v == "":
		return problem.New(problem.Invalid, "%s must not be empty", field)
	case len(v) > maxLen:
		return invalid(field, v, fmt.Sprintf("must be at most %d bytes long", maxLen))
	case !utf8.ValidString(v):
		return invalid(field, v, "must be valid UTF-8")
	case v == "." || v == "..":
		return invalid(field, v, "is reserved")
	case strings.HasPrefix(v, "-"):
		return invalid(field, v, "must not begin with '-'")
	case strings.Contains(v, ".."):
		return invalid(field, v, "must not contain '..'")
	case strings.ContainsAny(v, `/\`):
		return invalid(field, v, "must not contain '/' or '\\'")
	case strings.Contains(v, "%"):
		return invalid(field, v, "must not contain '%'")
	}
	for _, r := range v {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return invalid(field, v, "must not contain control characters")
		}
	}
	return nil
}

// validateText checks free text shown to people (project names): length
// and no control characters; required text must be non-blank.
func validateText(field, v string, maxLen int, required bool) error {
	if required && strings.TrimSpace(v) == "" {
		return problem.New(problem.Invalid, "%s must not be empty", field)
	}
	if len(v) > maxLen {
		return invalid(field, v, fmt.Sprintf("must be at most %d bytes long", maxLen))
	}
	if !utf8.ValidString(v) {
		return invalid(field, v, "must be valid UTF-8")
	}
	for _, r := range v {
		if unicode.IsControl(r) {
			return invalid(field, v, "must not contain control characters")
		}
	}
	return nil
}

// ValidateProjectKey checks a project key as Bitbucket does: a letter,
// then letters, digits or '_', at most 128. Either case is accepted; keys
// are stored in upper case.
//
// A key beginning with '~' is a user's personal project: '~' and then a
// login of ASCII letters, digits and "._-" only (so it is safe in an HTTP
// and an SSH path). '~' is valid nowhere else. Whether that user exists is
// the callers' check (IsPersonalKey, and the store's CreateProject).
func ValidateProjectKey(k string) error {
	if err := checkCommon("project key", k, maxKeyLen); err != nil {
		return err
	}
	if name, ok := strings.CutPrefix(k, "~"); ok {
		if name == "" || name[0] == '.' || name[0] == '-' {
			return invalid("project key", k, "a personal project key is '~' and a user name")
		}
		for i := 0; i < len(name); i++ {
			c := name[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
				return invalid("project key", k, "a personal project key is '~' and a user name of letters, digits and '.', '_', '-'")
			}
		}
		return nil
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if i == 0 && !letter {
			return invalid("project key", k, "must begin with a letter")
		}
		if !letter && !(c >= '0' && c <= '9') && c != '_' {
			return invalid("project key", k, "may hold only letters, digits and '_'")
		}
	}
	return nil
}

// IsPersonalKey reports whether k names a personal project ("~alice"),
// and whose: the user name after the '~'.
func IsPersonalKey(k string) (user string, ok bool) {
	return strings.CutPrefix(k, "~")
}

// ValidateRepoName checks a repository's display name: the common rules,
// letters, digits, spaces and "._-" only, no leading '.', and a name that
// makes a valid slug (the slug is derived from it).
func ValidateRepoName(name string) error {
	if err := checkCommon("repository name", name, maxNameLen); err != nil {
		return err
	}
	for _, r := range name {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) && !strings.ContainsRune(" ._-", r) {
			return invalid("repository name", name, "may hold only letters, digits, spaces and '.', '_', '-'")
		}
	}
	if strings.TrimSpace(name) != name {
		return invalid("repository name", name, "must not begin or end with a space")
	}
	if strings.HasPrefix(name, ".") {
		return invalid("repository name", name, "must not begin with '.'")
	}
	if err := ValidateSlug(Slugify(name)); err != nil {
		return invalid("repository name", name, "does not make a valid slug: "+problem.Message(err))
	}
	return nil
}

// Slugify derives a slug from a repository name: lower case, spaces to
// '-', only [a-z0-9._-] kept, runs of '.' collapsed (no ".."), no leading
// '-' or '.', no trailing '.', no ".git" suffix, at most 128 bytes. The
// result may still be invalid (empty, reserved); callers validate it.
func Slugify(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		switch {
		case r == ' ':
			r = '-'
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
		default:
			continue
		}
		if r == '.' && strings.HasSuffix(b.String(), ".") {
			continue
		}
		b.WriteRune(r)
	}
	s := b.String()
	for {
		before := s
		s = strings.TrimLeft(s, "-.")
		s = strings.TrimSuffix(s, ".git")
		s = strings.TrimRight(s, ".")
		if len(s) > maxKeyLen {
			s = s[:maxKeyLen]
		}
		if s == before {
			return s
		}
	}
}

// ValidateSlug checks a repository slug: [a-z0-9._-], the common rules, no
// leading '.', no trailing '.', not ending in ".git", not reserved, at
// most 128 bytes.
func ValidateSlug(slug string) error {
	if err := checkCommon("repository slug", slug, maxKeyLen); err != nil {
		return err
	}
	for i := 0; i < len(slug); i++ {
		c := slug[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return invalid("repository slug", slug, "may hold only lower-case letters, digits and '.', '_', '-'")
		}
	}
	switch {
	case strings.HasPrefix(slug, "."):
		return invalid("repository slug", slug, "must not begin with '.'")
	case strings.HasSuffix(slug, "."):
		return invalid("repository slug", slug, "must not end with '.'")
	case strings.HasSuffix(slug, ".git"):
		return invalid("repository slug", slug, "must not end with '.git'")
	case reservedSlugs[slug]:
		return invalid("repository slug", slug, "is reserved")
	}
	return nil
}

// ValidateUserName checks a login: the common rules, then letters,
// digits and "._@+-" only (e-mail addresses are common logins), not
// beginning with '.'.
func ValidateUserName(name string) error {
	if err := checkCommon("user name", name, maxNameLen); err != nil {
		return err
	}
	for _, r := range name {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) && !strings.ContainsRune("._@+-", r) {
			return invalid("user name", name, "may hold only letters, digits and '.', '_', '@', '+', '-'")
		}
	}
	if strings.HasPrefix(name, ".") {
		return invalid("user name", name, "must not begin with '.'")
	}
	return nil
}

// ValidateGroupName checks a group name: the common rules; spaces are
// allowed inside ("Project Leads") but not at either end.
func ValidateGroupName(name string) error {
	if err := checkCommon("group name", name, maxNameLen); err != nil {
		return err
	}
	if strings.TrimSpace(name) != name {
		return invalid("group name", name, "must not begin or end with a space")
	}
	return nil
}

// ValidateBranchName checks a short branch name (a repository's default
// branch) by gitref's rules, the same the push path and the REST API apply.
func ValidateBranchName(name string) error { return gitref.CheckBranchName(name) }
