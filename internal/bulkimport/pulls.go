package bulkimport

import (
	"context"
	"fmt"

	"github.com/sluice-scm/sluice/internal/gitref"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
)

var pullStates = map[string]bool{store.PullOpen: true, store.PullMerged: true, store.PullDeclined: true}

func validPull(r Record) error {
	if r.Number <= 0 {
		return problem.New(problem.Invalid, "pull request number %d is not positive", r.Number)
	}
	if r.State != "" && !pullStates[r.State] {
		return problem.New(problem.Invalid, "pull request state %q is not OPEN, MERGED or DECLINED", r.State)
	}
	for _, ref := range []string{r.FromRef, r.ToRef} {
		if err := repo.ValidateRefName(ref); err != nil {
			return err
		}
	}
	for _, sha := range []string{r.FromSHA, r.ToSHA, r.BaseSHA} {
		if sha != "" && !gitref.ValidObjectID(sha) {
			return problem.New(problem.Invalid, "%q is not an object id", sha)
		}
	}
	if r.Title == "" {
		return problem.New(problem.Invalid, "a pull request needs a title")
	}
	return nil
}

// prKey is how NameIDs keys pull requests.
func prKey(repoID, number int64) string { return fmt.Sprintf("%d/%d", repoID, number) }

func (im *importer) pullRequests(ctx context.Context) error {
	var rows []store.PullRequest
	var keys []string
	seen := map[string]bool{}
	for _, p := range im.batch {
		r := p.rec
		if err := validPull(r); err != nil {
			return lineErr(p, "%s", problem.Message(err))
		}
		rid, err := im.need(ctx, p, store.BulkRepos, "repository", r.Repository)
		if err != nil {
			return err
		}
		k := prKey(rid, r.Number)
		id, err := im.lookup(ctx, store.BulkPullRequests, k)
		if err != nil {
			return err
		}
		if id != 0 || seen[k] {
			continue
		}
		seen[k] = true
		var author int64
		if r.Author != "" {
			if author, err = im.need(ctx, p, store.BulkUsers, "user", r.Author); err != nil {
				return err
			}
		}
		state := r.State
		if state == "" {
			state = store.PullOpen
		}
		rows = append(rows, store.PullRequest{RepoID: rid, Number: r.Number, FromRepoID: rid, FromRef: r.FromRef, FromSHA: r.FromSHA,
			ToRef: r.ToRef, ToSHA: r.ToSHA, BaseSHA: r.BaseSHA, Title: r.Title, Description: r.Description,
			State: state, AuthorID: author, CreatedAt: r.CreatedAt})
		keys = append(keys, lookupKey(store.BulkRepos, r.Repository)+"#"+fmt.Sprint(r.Number))
	}
	if len(rows) == 0 {
		return nil
	}
	if err := im.d.DB.BulkCreatePullRequests(ctx, rows); err != nil {
		return err
	}
	im.created.PullRequests += len(rows)
	im.touched(store.BulkPullRequests)
	for _, k := range keys {
		im.createdPRs[k] = true
	}
	return nil
}

var (
	roles    = map[string]bool{store.RoleAuthor: true, store.RoleReviewer: true, store.RoleParticipant: true}
	statuses = map[string]bool{"": true, store.StatusApproved: true, store.StatusNeedsWork: true, store.StatusUnapproved: true}
)

// activity adds participants and comments to pull requests this import
// created; a pull request that existed keeps what it has, so a re-run
// adds no second copy.
func (im *importer) activity(ctx context.Context) error {
	var parts []store.PullParticipant
	var comments []store.PullComment
	for _, p := range im.batch {
		r := p.rec
		if !im.createdPRs[lookupKey(store.BulkRepos, r.Repository)+"#"+fmt.Sprint(r.Number)] {
			continue
		}
		rid, err := im.need(ctx, p, store.BulkRepos, "repository", r.Repository)
		if err != nil {
			return err
		}
		prID, err := im.lookup(ctx, store.BulkPullRequests, prKey(rid, r.Number))
		if err != nil {
			return err
		}
		if prID == 0 {
			return lineErr(p, "unknown pull request %s#%d", r.Repository, r.Number)
		}
		seen := map[int64]bool{}
		for _, pa := range r.Participants {
			if !roles[pa.Role] || !statuses[pa.Status] {
				return lineErr(p, "participant %q: role %q or status %q unknown", pa.User, pa.Role, pa.Status)
			}
			uid, err := im.need(ctx, p, store.BulkUsers, "user", pa.User)
			if err != nil {
				return err
			}
			if seen[uid] {
				continue // one row per user and pull request
			}
			seen[uid] = true
			parts = append(parts, store.PullParticipant{PRID: prID,
				Participant: store.Participant{UserID: uid, Role: pa.Role, Status: pa.Status}})
		}
		for _, c := range r.Comments {
			if c.Text == "" {
				return lineErr(p, "a comment needs text")
			}
			var uid int64
			if c.Author != "" {
				if uid, err = im.need(ctx, p, store.BulkUsers, "user", c.Author); err != nil {
					return err
				}
			}
			comments = append(comments, store.PullComment{PRID: prID, AuthorID: uid, Text: c.Text, Created: c.CreatedAt})
		}
	}
	if err := im.d.DB.BulkAddParticipants(ctx, parts); err != nil {
		return err
	}
	if err := im.d.DB.BulkCreateComments(ctx, comments); err != nil {
		return err
	}
	im.created.Comments += len(comments)
	return nil
}
