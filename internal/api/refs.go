package api

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/hooks"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
)

// Branches and tags. Reads go through repo.Refs; every change is one
// `git update-ref` run through gitcmd with the hook environment of the
// caller, so the reference-transaction hook judges it against the branch
// permissions exactly as a push is judged (a refusal names the rule, 403),
// records it and bumps the refs generation as for a push (pack caches
// keyed on the generation then cannot serve stale data).

func refOf(r repo.Ref, typ string) refJSON {
	return refJSON{ID: r.Name, DisplayID: r.DisplayID, Type: typ, LatestCommit: r.LatestCommit,
		LatestChangeset: r.LatestCommit, IsDefault: r.IsDefault}
}

func (c *call) listRefs(kind, typ string) error {
	_, r, err := c.repoFor(auth.Read)
	if err != nil {
		return err
	}
	pg, err := c.page()
	if err != nil {
		return err
	}
	filter := c.query("filterText")
	if len(filter) > 255 {
		return problem.New(problem.Invalid, "filterText must be at most 255 bytes long")
	}
	order, err := c.refOrder()
	if err != nil {
		return err
	}
	details := false
	if kind == "heads" {
		if details, err = c.boolQuery("details", false); err != nil {
			return err
		}
	}
	refs, total, err := c.s.Repos.RefsOrdered(c.ctx, r.ID, kind, filter, order, pg.Start, pg.Limit)
	if err != nil {
		return err
	}
	page := pageJSON[refJSON]{Size: len(refs), Limit: pg.Limit, Start: pg.Start, Values: make([]refJSON, len(refs))}
	for i, ref := range refs {
		page.Values[i] = refOf(ref, typ)
	}
	page.IsLastPage = pg.Start+len(refs) >= total
	if !page.IsLastPage {
		next := pg.Start + len(refs)
		page.NextPageStart = &next
	}
	if details {
		detailed, err := c.branchDetails(r, page, refs)
		if err != nil {
			return err
		}
		return c.json(detailed)
	}
	return c.json(page)
}

func (c *call) listBranches() error { return c.listRefs("heads", "BRANCH") }
func (c *call) listTags() error     { return c.listRefs("tags", "TAG") }

type createRefBody struct {
	Name       string `json:"name"`
	StartPoint string `json:"startPoint"`
	Message    string `json:"message"`
}

// resolveRev turns a caller's revision into a commit id the repository
// may serve: it must exist and be reachable from the repository's own
// refs. A fork reads its origin's objects through alternates, and any
// repository keeps unreachable objects around for a while (a deleted
// branch); neither may be served by id.
func (c *call) resolveRev(r *store.Repository, field, rev string) (string, error) {
	if rev == "" {
		return "", problem.New(problem.Invalid, "%s is required", field)
	}
	if len(rev) > 1024 || strings.HasPrefix(rev, "-") || strings.ContainsFunc(rev, unicode.IsControl) {
		return "", problem.New(problem.Invalid, "%s %s is not a valid revision", field, quoteShort(rev))
	}
	sha, err := c.s.Repos.ResolveCommit(c.ctx, r.ID, rev)
	if problem.Is(err, problem.NotFound) {
		return "", problem.New(problem.NotFound, "%s %s not found", field, quoteShort(rev))
	}
	if problem.Is(err, problem.Invalid) {
		return "", problem.New(problem.Invalid, "%s %s is not a valid revision", field, quoteShort(rev))
	}
	if err != nil {
		return "", err
	}
	ok, err := c.s.Repos.IsReachable(c.ctx, r.ID, sha)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", problem.New(problem.NotFound, "%s %s not found", field, quoteShort(rev))
	}
	return sha, nil
}

// atOrDefault is the "at"/"until" revision of a read, the default branch
// when the caller named none.
func (c *call) atOrDefault(r *store.Repository, field string) (sha, at string, err error) {
	at = c.query(field)
	if at == "" {
		at = "refs/heads/" + r.DefaultBranch
		sha, err := c.s.Repos.ResolveCommit(c.ctx, r.ID, at)
		if problem.Is(err, problem.NotFound) {
			return "", "", problem.New(problem.NotFound, "the default branch %q does not exist yet", r.DefaultBranch)
		}
		return sha, at, err
	}
	sha, err = c.resolveRev(r, field, at)
	return sha, at, err
}

// refExists reports the commit a full ref name points at, or "" when the
// ref does not exist.
func (c *call) refCommit(r *store.Repository, ref string) (string, error) {
	sha, err := c.s.Repos.ResolveCommit(c.ctx, r.ID, ref)
	if problem.Is(err, problem.NotFound) {
		return "", nil
	}
	return sha, err
}

// updateRef runs git update-ref for r with the hook environment. args are
// ref, new and old values (or ref and old with -d).
func (c *call) updateRef(r *store.Repository, flags []string, args []string) error {
	env, done := c.s.Hooks.Register(hooks.Request{RepoID: r.ID, Principal: c.p, Transport: "rest"})
	defer done()
	// A ref update half done must finish even if the client hangs up.
	ctx := context.WithoutCancel(c.ctx)
	return c.s.Git.Run(ctx, gitcmd.Cmd{
		Dir:   c.s.Repos.Path(r.ID),
		Name:  "update-ref",
		Flags: flags,
		Args:  args,
		Env:   env,
	})
}

// refConflict reports whether update-ref failed because the ref exists,
// moved meanwhile, or clashes with another ref's directory (a/b vs a).
func refConflict(err error) bool {
	var ee *gitcmd.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	for _, s := range []string{"reference already exists", "cannot lock ref", "exists; cannot create"} {
		if strings.Contains(ee.Stderr, s) {
			return true
		}
	}
	return false
}

// refRejected reports whether the reference-transaction hook refused the
// update (it could not record it), which is the server being unavailable,
// not the caller's fault.
func refRejected(err error) bool {
	var ee *gitcmd.ExitError
	return errors.As(err, &ee) && strings.Contains(ee.Stderr, "reference-transaction")
}

func zeroOID(like string) string { return strings.Repeat("0", len(like)) }

func (c *call) createBranch() error {
	_, r, err := c.repoFor(auth.Write)
	if err != nil {
		return err
	}
	var b createRefBody
	if err := c.decode(&b, false); err != nil {
		return err
	}
	ref, err := branchRef("name", b.Name)
	if err != nil {
		return err
	}
	sha, err := c.resolveRev(r, "startPoint", b.StartPoint)
	if err != nil {
		return err
	}
	if cur, err := c.refCommit(r, ref); err != nil {
		return err
	} else if cur != "" {
		return problem.New(problem.Conflict, "branch %q already exists", strings.TrimPrefix(ref, "refs/heads/"))
	}
	if err := c.updateRef(r, nil, []string{ref, sha, zeroOID(sha)}); err != nil {
		return c.refError(err, "branch", ref)
	}
	c.s.logger.Info("branch created", "repo_id", r.ID, "ref", ref, "principal", c.p.String())
	short := strings.TrimPrefix(ref, "refs/heads/")
	return c.json(refJSON{ID: ref, DisplayID: short, Type: "BRANCH", LatestCommit: sha, LatestChangeset: sha,
		IsDefault: short == r.DefaultBranch})
}

func (c *call) refError(err error, what, ref string) error {
	var ee *gitcmd.ExitError
	if errors.As(err, &ee) {
		// A branch permission refused the move in the hook: the rule
		// is named, and it is the caller's to respect.
		if msg, ok := hooks.Refusal(ee.Stderr); ok {
			return problem.Wrap(problem.Forbidden, err, msg)
		}
	}
	switch {
	case refRejected(err):
		return problem.Wrap(problem.Unavailable, err, "the ref change could not be recorded; try again")
	case refConflict(err):
		return problem.Wrap(problem.Conflict, err, fmt.Sprintf("%s %q conflicts with an existing ref or was changed meanwhile", what, ref))
	}
	return fmt.Errorf("update %s: %w", ref, err)
}

type deleteBranchBody struct {
	Name     string `json:"name"`
	EndPoint string `json:"endPoint"`
	DryRun   bool   `json:"dryRun"`
}

// deleteBranch is Bitbucket's DELETE /rest/branch-utils/1.0/…/branches
// with {name, endPoint, dryRun}; endPoint, when given, must be the commit
// the branch is at (a compare-and-swap).
func (c *call) deleteBranch() error {
	_, r, err := c.repoFor(auth.Write)
	if err != nil {
		return err
	}
	var b deleteBranchBody
	if err := c.decode(&b, false); err != nil {
		return err
	}
	ref, err := branchRef("name", b.Name)
	if err != nil {
		return err
	}
	short := strings.TrimPrefix(ref, "refs/heads/")
	if short == r.DefaultBranch {
		return problem.New(problem.Conflict, "branch %q is the default branch; change the default branch first", short)
	}
	cur, err := c.refCommit(r, ref)
	if err != nil {
		return err
	}
	if cur == "" {
		return problem.New(problem.NotFound, "branch %q not found", short)
	}
	old := cur
	if b.EndPoint != "" {
		if b.EndPoint != cur {
			return problem.New(problem.Conflict, "branch %q is at %s, not at endPoint %s", short, cur, quoteShort(b.EndPoint))
		}
	}
	if b.DryRun {
		return c.noContent()
	}
	if err := c.updateRef(r, []string{"-d"}, []string{ref, old}); err != nil {
		return c.refError(err, "branch", ref)
	}
	c.s.logger.Info("branch deleted", "repo_id", r.ID, "ref", ref, "principal", c.p.String())
	return c.noContent()
}

func (c *call) getDefaultBranch() error {
	_, r, err := c.repoFor(auth.Read)
	if err != nil {
		return err
	}
	ref := "refs/heads/" + r.DefaultBranch
	sha, err := c.refCommit(r, ref)
	if err != nil {
		return err
	}
	return c.json(refJSON{ID: ref, DisplayID: r.DefaultBranch, Type: "BRANCH", LatestCommit: sha, LatestChangeset: sha, IsDefault: true})
}

type defaultBranchBody struct {
	ID string `json:"id"`
}

// setDefaultBranch moves HEAD. As in Bitbucket the branch need not exist
// yet (an empty repository, or a branch about to be pushed).
func (c *call) setDefaultBranch() error {
	_, r, err := c.repoFor(auth.Read)
	if err != nil {
		return err
	}
	var b defaultBranchBody
	if err := c.decode(&b, false); err != nil {
		return err
	}
	if _, err := branchRef("id", b.ID); err != nil {
		return err
	}
	if err := c.s.Accounts.SetDefaultBranch(c.ctx, c.actor(), r, b.ID); err != nil {
		return err
	}
	return c.noContent()
}

// maxTagMessage caps an annotated tag's message; release notes fit, and
// the request body cap would stop more anyway.
const maxTagMessage = 64 << 10

// createTag makes a lightweight tag, or an annotated one when the body has
// a message. The annotated tag object is written with git mktag, which
// reads it on stdin (the message never touches a command line) and checks
// it as fsck would.
func (c *call) createTag() error {
	_, r, err := c.repoFor(auth.Write)
	if err != nil {
		return err
	}
	var b createRefBody
	if err := c.decode(&b, false); err != nil {
		return err
	}
	ref, err := tagRef("name", b.Name)
	if err != nil {
		return err
	}
	sha, err := c.resolveRev(r, "startPoint", b.StartPoint)
	if err != nil {
		return err
	}
	if cur, err := c.refCommit(r, ref); err != nil {
		return err
	} else if cur != "" {
		return problem.New(problem.Conflict, "tag %q already exists", strings.TrimPrefix(ref, "refs/tags/"))
	}
	target := sha
	if b.Message != "" {
		if len(b.Message) > maxTagMessage {
			return problem.New(problem.Invalid, "message must be at most %d bytes long", maxTagMessage)
		}
		if strings.ContainsRune(b.Message, 0) {
			return problem.New(problem.Invalid, "message must not contain NUL")
		}
		if target, err = c.writeTagObject(r, sha, strings.TrimPrefix(ref, "refs/tags/"), b.Message); err != nil {
			return err
		}
	}
	if err := c.updateRef(r, nil, []string{ref, target, zeroOID(target)}); err != nil {
		return c.refError(err, "tag", ref)
	}
	c.s.logger.Info("tag created", "repo_id", r.ID, "ref", ref, "principal", c.p.String())
	return c.json(refJSON{ID: ref, DisplayID: strings.TrimPrefix(ref, "refs/tags/"), Type: "TAG", LatestCommit: sha, LatestChangeset: sha})
}

// writeTagObject writes an annotated tag object for commit sha and returns
// its id. The tagger is the calling user.
func (c *call) writeTagObject(r *store.Repository, sha, name, message string) (string, error) {
	tagger, email := "Sluice", ""
	if c.p.UserID != 0 {
		if u, err := c.s.Store.UserByID(c.ctx, c.p.UserID); err == nil {
			tagger, email = displayName(u), u.Email
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "object %s\ntype commit\ntag %s\ntagger %s <%s> %d +0000\n\n",
		sha, name, identText(tagger), identText(email), time.Now().Unix())
	b.WriteString(message)
	if !strings.HasSuffix(message, "\n") {
		b.WriteByte('\n')
	}
	out, err := c.s.Git.Output(c.ctx, gitcmd.Cmd{
		Dir:   c.s.Repos.Path(r.ID),
		Name:  "mktag",
		Stdin: strings.NewReader(b.String()),
	})
	if err != nil {
		var ee *gitcmd.ExitError
		if errors.As(err, &ee) {
			return "", problem.Wrap(problem.Invalid, err, "the tag was refused by git: "+strings.TrimSpace(ee.Stderr))
		}
		return "", fmt.Errorf("write tag object: %w", err)
	}
	oid := strings.TrimSpace(string(out))
	if len(oid) != 40 && len(oid) != 64 {
		return "", fmt.Errorf("write tag object: unexpected mktag output %q", oid)
	}
	return oid, nil
}

// identText makes a name or e-mail safe inside a git ident line, whose
// syntax gives '<', '>' and newlines meaning.
func identText(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '<' || r == '>' || unicode.IsControl(r) {
			return -1
		}
		return r
	}, s)
	return strings.TrimSpace(s)
}

func (c *call) deleteTag() error {
	_, r, err := c.repoFor(auth.Write)
	if err != nil {
		return err
	}
	ref, err := tagRef("name", c.path("name"))
	if err != nil {
		return err
	}
	cur, err := c.refCommit(r, ref)
	if err != nil {
		return err
	}
	if cur == "" {
		return problem.New(problem.NotFound, "tag %q not found", strings.TrimPrefix(ref, "refs/tags/"))
	}
	if err := c.updateRef(r, []string{"-d"}, []string{ref}); err != nil {
		return c.refError(err, "tag", ref)
	}
	c.s.logger.Info("tag deleted", "repo_id", r.ID, "ref", ref, "principal", c.p.String())
	return c.noContent()
}
