package api

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/sluice-scm/sluice/internal/hooks"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// checkText checks free text shown to people: valid UTF-8, no control
// characters except tab (descriptions) and a length cap.
func checkText(field, v string, maxLen int) error {
	if len(v) > maxLen {
		return problem.New(problem.Invalid, "%s must be at most %d bytes long", field, maxLen)
	}
	if !utf8.ValidString(v) {
		return problem.New(problem.Invalid, "%s must be valid UTF-8", field)
	}
	for _, r := range v {
		if unicode.IsControl(r) && r != '\t' {
			return problem.New(problem.Invalid, "%s must not contain control characters", field)
		}
	}
	return nil
}

// branchRef turns a branch as Bitbucket clients send it ("main" or
// "refs/heads/main") into the full ref, after checking the short name by
// git's rules and ours (no component beginning with '-').
func branchRef(field, name string) (string, error) {
	short := strings.TrimPrefix(name, "refs/heads/")
	if err := store.ValidateBranchName(short); err != nil {
		return "", relabel(err, field)
	}
	ref := "refs/heads/" + short
	if err := hooks.CheckRefName(ref); err != nil {
		return "", relabel(err, field)
	}
	return ref, nil
}

// tagRef is branchRef for tags.
func tagRef(field, name string) (string, error) {
	short := strings.TrimPrefix(name, "refs/tags/")
	if err := store.ValidateBranchName(short); err != nil {
		return "", relabel(err, field)
	}
	ref := "refs/tags/" + short
	if err := hooks.CheckRefName(ref); err != nil {
		return "", relabel(err, field)
	}
	return ref, nil
}

// relabel puts the request's field name in front of a validation message
// written for another context ("branch name …" for a tag).
func relabel(err error, field string) error {
	if problem.KindOf(err) != problem.Invalid {
		return err
	}
	return problem.New(problem.Invalid, "%s: %s", field, problem.Message(err))
}

// maxRepoPath caps a file path in browse, raw and archive requests; git
// itself handles longer ones but no legitimate tree needs them (PATH_MAX).
const maxRepoPath = 4096

// cleanRepoPath checks a path inside a repository as a caller sent it:
// relative, '/'-separated, without empty, "." or ".." components, without
// NUL or other control characters. "" (the root) is allowed. The result
// never starts or ends with '/'. It is a path inside a git tree, never a
// file system path, but a clean one keeps git from interpreting it.
func cleanRepoPath(field, p string) (string, error) {
	p = strings.TrimSuffix(p, "/")
	if p == "" {
		return "", nil
	}
	if len(p) > maxRepoPath {
		return "", problem.New(problem.Invalid, "%s must be at most %d bytes long", field, maxRepoPath)
	}
	if !utf8.ValidString(p) {
		return "", problem.New(problem.Invalid, "%s must be valid UTF-8", field)
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return "", problem.New(problem.Invalid, "%s must not contain control characters", field)
		}
	}
	if strings.HasPrefix(p, "/") {
		return "", problem.New(problem.Invalid, "%s must be relative", field)
	}
	for _, comp := range strings.Split(p, "/") {
		switch comp {
		case "":
			return "", problem.New(problem.Invalid, "%s must not contain empty components", field)
		case ".", "..":
			return "", problem.New(problem.Invalid, "%s must not contain %q components", field, comp)
		}
	}
	return p, nil
}

// archivePrefix checks an archive prefix: a clean relative path, not
// beginning with '-'; the result ends with '/' (git prepends it verbatim
// to every entry name, so without one "x" would give "xREADME").
func archivePrefix(p string) (string, error) {
	if p == "" {
		return "", nil
	}
	clean, err := cleanRepoPath("prefix", p)
	if err != nil {
		return "", err
	}
	if clean == "" {
		return "", nil
	}
	for _, comp := range strings.Split(clean, "/") {
		if strings.HasPrefix(comp, "-") {
			return "", problem.New(problem.Invalid, "prefix must not have a component beginning with '-'")
		}
		if strings.ContainsAny(comp, `\:*?"<>|`) {
			return "", problem.New(problem.Invalid, "prefix must not contain any of \\:*?\"<>|")
		}
	}
	return clean + "/", nil
}

// quoteShort quotes v for a message, cut so that a megabyte of garbage does
// not end up in an error body.
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
