package sshd

import (
	"strings"

	"github.com/sluice-scm/sluice/internal/hosting"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// maxCommandLen bounds an exec request. The longest valid command is a
// service name, two quotes and a path of two names of at most maxKeyLen
// bytes each; 1 KiB leaves ample room and keeps parsing trivially cheap.
const maxCommandLen = 1024

// command is a parsed exec request.
type command struct {
	Service    string // hosting.UploadPack, ReceivePack or UploadArchive
	ProjectKey string
	Slug       string
}

// errBadCommand is what every malformed exec request answers. It names the
// accepted shape instead of echoing the input back.
var errBadCommand = problem.New(problem.Invalid,
	"sluice accepts only git-upload-pack, git-receive-pack and git-upload-archive with a quoted '/PROJECT/repo.git' path")

// parseCommand parses an exec request as git sends it over SSH:
//
//	git-upload-pack '/PROJ/repo.git'
//
// The grammar is deliberately narrower than a shell's: a service name from
// a fixed list, one space, and one single-quoted path of the form
// [/]KEY/slug[.git] whose characters are those project keys and slugs may
// hold. Nothing is ever handed to a shell, so there is no quoting to
// undo; anything else — options (--upload-pack=…, --help), a second
// argument, shell syntax (; $( ) `), escaped quotes, control characters,
// "..", a leading '-' — fails here, before any lookup or process.
func parseCommand(s string) (command, error) {
	if len(s) > maxCommandLen {
		return command{}, errBadCommand
	}
	service, arg, ok := strings.Cut(s, " ")
	if !ok {
		return command{}, errBadCommand
	}
	switch service {
	case hosting.UploadPack, hosting.ReceivePack, hosting.UploadArchive:
	default:
		return command{}, errBadCommand
	}
	if len(arg) < 2 || arg[0] != '\'' || arg[len(arg)-1] != '\'' {
		return command{}, errBadCommand
	}
	path := arg[1 : len(arg)-1]
	key, slug, err := parsePath(path)
	if err != nil {
		return command{}, err
	}
	return command{Service: service, ProjectKey: key, Slug: slug}, nil
}

// parsePath splits [/]KEY/slug[.git]. Every byte is checked against the
// characters a project key or a slug may contain before store's own
// validators run, so the quote, the shell metacharacters and control
// bytes never get further than this function.
func parsePath(p string) (key, slug string, err error) {
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '/' || c == '.' || c == '_' || c == '-' || c == '~') {
			return "", "", errBadCommand
		}
	}
	p = strings.TrimPrefix(p, "/")
	key, slug, ok := strings.Cut(p, "/")
	if !ok || strings.Contains(slug, "/") || strings.Contains(p, "..") {
		return "", "", errBadCommand
	}
	slug = strings.TrimSuffix(slug, ".git")
	// Slugs are lower case; a client that capitalised one in its remote URL
	// means the same repository, as the project key is case-insensitive.
	slug = strings.ToLower(slug)
	if store.ValidateProjectKey(key) != nil || store.ValidateSlug(slug) != nil {
		return "", "", errBadCommand
	}
	return key, slug, nil
}
