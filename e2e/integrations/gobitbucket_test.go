package integrations_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"

	bitbucketv1 "github.com/gfleury/go-bitbucket-v1"
)

// versioned is the go client's transport. The client is generated from
// Atlassian's Swagger document with /rest/{family}/1.0 written into every
// path; for the latest run it rewrites that to /rest/{family}/latest,
// which is what clients generated from the current DC document send. It
// also keeps the last exchange, which a failed step prints.
type versioned struct {
	api    string
	mu     sync.Mutex
	last   string
	status int
}

var numbered = regexp.MustCompile(`^/rest/([a-z-]+)/1\.0/`)

func (v *versioned) RoundTrip(req *http.Request) (*http.Response, error) {
	if v.api != "1.0" {
		req.URL.Path = numbered.ReplaceAllString(req.URL.Path, "/rest/$1/"+v.api+"/")
		req.URL.RawPath = ""
	}
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	exchange := fmt.Sprintf("request:  %s %s %s\n", req.Method, req.URL, body)
	if err != nil {
		exchange += "response: " + err.Error()
	} else {
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(out))
		shown := string(out)
		if len(shown) > 600 {
			shown = shown[:600] + "..."
		}
		exchange += fmt.Sprintf("response: %d %s", resp.StatusCode, shown)
		v.status = resp.StatusCode
	}
	v.mu.Lock()
	v.last = exchange
	v.mu.Unlock()
	return resp, err
}

// empty is the error of a call that Bitbucket answers with no body (204,
// or 202 for a repository deletion): the client decodes every success as
// JSON and returns io.EOF for an empty one, which is no fault of the server.
func (v *versioned) empty(err error) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if errors.Is(err, io.EOF) && v.status >= 200 && v.status < 300 {
		return nil
	}
	return err
}

func (v *versioned) lastExchange() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.last
}

// goBitbucket drives github.com/gfleury/go-bitbucket-v1 through the same
// story as the Python clients, with what the client can express: it has
// no request body for creating branches and tags (CreateBranch and
// CreateTag post nothing), and no call to delete either.
func (s *suite) goBitbucket(t *testing.T, api string, sd seed, newProject string) {
	tr := &versioned{api: api}
	cfg := bitbucketv1.NewConfiguration(s.node.URL+"/rest", func(c *bitbucketv1.Configuration) {
		c.HTTPClient = &http.Client{Transport: tr}
	})
	ctx := context.WithValue(context.Background(), bitbucketv1.ContextBasicAuth,
		bitbucketv1.BasicAuth{UserName: "admin", Password: s.node.AdminPassword})
	bb := bitbucketv1.NewAPIClient(ctx, cfg).DefaultApi
	P, R := sd.project, sd.repo

	// step runs one part of the story; a failure shows the exchange that
	// broke it and the remaining steps still run.
	step := func(name string, fn func() error) bool {
		t.Helper()
		if err := fn(); err != nil {
			t.Errorf("%s: %v\n%s", name, err, tr.lastExchange())
			return false
		}
		return true
	}
	expect := func(ok bool, format string, args ...any) error {
		if ok {
			return nil
		}
		return fmt.Errorf("expected "+format, args...)
	}

	step("create project, get, list (paged)", func() error {
		if _, err := bb.CreateProject(bitbucketv1.Project{Key: newProject, Name: "Made by go-bitbucket-v1"}); err != nil {
			return err
		}
		resp, err := bb.GetProject(newProject)
		if err != nil {
			return err
		}
		p, err := bitbucketv1.GetRrojectResponse(resp)
		if err != nil || p.Key != newProject {
			return fmt.Errorf("the new project, got %+v (%v)", p, err)
		}
		var keys []string
		for start := 0; ; {
			resp, err := bb.GetProjects(map[string]any{"limit": 1, "start": start})
			if err != nil {
				return err
			}
			page, err := bitbucketv1.GetProjectsResponse(resp)
			if err != nil {
				return err
			}
			for _, p := range page {
				keys = append(keys, p.Key)
			}
			more, next := bitbucketv1.HasNextPage(resp)
			if !more {
				break
			}
			start = next
		}
		return expect(strings.Contains(strings.Join(keys, ","), newProject) && strings.Contains(strings.Join(keys, ","), P),
			"%s and %s over pages of one, got %v", P, newProject, keys)
	})

	step("create, get, list, delete repository; delete project", func() error {
		resp, err := bb.CreateRepository(newProject, bitbucketv1.Repository{Name: "made", ScmID: "git"})
		if err != nil {
			return err
		}
		r, err := bitbucketv1.GetRepositoryResponse(resp)
		if err != nil || r.Slug != "made" {
			return fmt.Errorf("the new repository, got %+v (%v)", r, err)
		}
		if resp, err = bb.GetRepositoriesWithOptions(newProject, map[string]any{"limit": 10}); err != nil {
			return err
		}
		repos, err := bitbucketv1.GetRepositoriesResponse(resp)
		if err != nil || len(repos) != 1 || repos[0].ID != r.ID {
			return fmt.Errorf("one repository, got %+v (%v)", repos, err)
		}
		if _, err := bb.DeleteRepository(newProject, "made"); tr.empty(err) != nil {
			return err
		}
		_, err = bb.DeleteProject(newProject)
		return tr.empty(err)
	})

	step("get seeded repository", func() error {
		resp, err := bb.GetRepository(P, R)
		if err != nil {
			return err
		}
		r, err := bitbucketv1.GetRepositoryResponse(resp)
		if err != nil {
			return err
		}
		return expect(r.Slug == R && r.Project != nil && r.Project.Key == P && r.Links != nil && len(r.Links.Clone) > 0,
			"the seeded repository with clone links, got %+v", r)
	})

	step("branches (paged), default branch get and set", func() error {
		var names []string
		for start := 0; ; {
			resp, err := bb.GetBranches(P, R, map[string]any{"limit": 1, "start": start})
			if err != nil {
				return err
			}
			page, err := bitbucketv1.GetBranchesResponse(resp)
			if err != nil {
				return err
			}
			for _, b := range page {
				names = append(names, b.DisplayID)
			}
			more, next := bitbucketv1.HasNextPage(resp)
			if !more {
				break
			}
			start = next
		}
		if len(names) != 2 {
			return fmt.Errorf("expected main and %s over pages of one, got %v", sd.feature, names)
		}
		if _, err := bb.SetDefaultBranch(P, R, "refs/heads/"+sd.feature); tr.empty(err) != nil {
			return err
		}
		resp, err := bb.GetDefaultBranch(P, R)
		if err != nil {
			return err
		}
		b, err := bitbucketv1.GetBranchResponse(resp)
		if err != nil || b.DisplayID != sd.feature {
			return fmt.Errorf("expected %s as default, got %+v (%v)", sd.feature, b, err)
		}
		_, err = bb.SetDefaultBranch(P, R, "refs/heads/main")
		return tr.empty(err)
	})

	step("tags: list, get", func() error {
		resp, err := bb.GetTags(P, R, map[string]any{"filterText": "seed"})
		if err != nil {
			return err
		}
		tags, err := bitbucketv1.GetTagsResponse(resp)
		if err != nil || len(tags) != 1 || tags[0].DisplayID != "seed-1" || tags[0].LatestCommit != sd.head {
			return fmt.Errorf("expected tag seed-1 at the head, got %+v (%v)", tags, err)
		}
		resp, err = bb.GetTag(P, R, "seed-1")
		if err != nil {
			return err
		}
		id, _ := resp.Values["id"].(string)
		return expect(id == "refs/tags/seed-1", "refs/tags/seed-1, got %v", resp.Values)
	})

	step("commits (paged), commit", func() error {
		var ids []string
		for start := 0; ; {
			resp, err := bb.GetCommits(P, R, map[string]any{"until": sd.head, "limit": 7, "start": start})
			if err != nil {
				return err
			}
			page, err := bitbucketv1.GetCommitsResponse(resp)
			if err != nil {
				return err
			}
			for _, c := range page {
				ids = append(ids, c.ID)
			}
			more, next := bitbucketv1.HasNextPage(resp)
			if !more {
				break
			}
			start = next
		}
		if len(ids) != seedCommits || ids[0] != sd.head {
			return fmt.Errorf("expected %d commits from the head, got %d", seedCommits, len(ids))
		}
		resp, err := bb.GetCommit(P, R, sd.head, nil)
		if err != nil {
			return err
		}
		return expect(resp.Values["id"] == sd.head, "the head commit, got %v", resp.Values)
	})

	step("raw file, browse directory", func() error {
		resp, err := bb.GetRawContent(P, R, sd.file, map[string]any{"at": sd.head})
		if err != nil {
			return err
		}
		if string(resp.Payload) != sd.content {
			return fmt.Errorf("expected the file's bytes %q, got %q", sd.content, resp.Payload)
		}
		if resp, err = bb.GetContent(P, R, map[string]any{"at": "refs/heads/main"}); err != nil {
			return err
		}
		c, err := bitbucketv1.GetContentResponse(resp)
		if err != nil {
			return err
		}
		var names []string
		for _, v := range c.Children.Values {
			names = append(names, v.Path.ToString)
		}
		return expect(strings.Contains(strings.Join(names, ","), sd.file), "%s in the root, got %v", sd.file, names)
	})

	step("grant and list repository permissions", func() error {
		if _, err := bb.SetPermissionForUser(P, R, map[string]any{"name": s.other, "permission": "REPO_WRITE"}); tr.empty(err) != nil {
			return err
		}
		resp, err := bb.GetUsersWithAnyPermission_24(P, R, map[string]any{"limit": 25})
		if err != nil {
			return err
		}
		perms, err := bitbucketv1.GetUsersPermissionResponse(resp)
		if err != nil {
			return err
		}
		for _, p := range perms {
			if p.User.Name == s.other && p.Permission == "REPO_WRITE" {
				return nil
			}
		}
		return fmt.Errorf("expected %s with REPO_WRITE, got %+v", s.other, perms)
	})

	var pr bitbucketv1.PullRequest
	ref := func(branch string) bitbucketv1.PullRequestRef {
		return bitbucketv1.PullRequestRef{ID: "refs/heads/" + branch,
			Repository: bitbucketv1.Repository{Slug: R, Project: &bitbucketv1.Project{Key: P}}}
	}
	if !step("create pull request", func() error {
		resp, err := bb.CreatePullRequest(P, R, bitbucketv1.PullRequest{
			Title: "Feature", Description: "from go-bitbucket-v1", State: "OPEN", Open: true,
			FromRef: ref(sd.feature), ToRef: ref("main"),
			Reviewers: []bitbucketv1.UserWithMetadata{{User: bitbucketv1.UserWithLinks{Name: s.other}}},
		})
		if err != nil {
			return err
		}
		pr, err = bitbucketv1.GetPullRequestResponse(resp)
		if err != nil {
			return err
		}
		return expect(pr.State == "OPEN" && len(pr.Reviewers) == 1 && pr.Reviewers[0].User.Name == s.other,
			"an open pull request reviewed by %s, got %+v", s.other, pr)
	}) {
		return
	}
	current := func() (bitbucketv1.PullRequest, error) {
		resp, err := bb.GetPullRequest(P, R, pr.ID)
		if err != nil {
			return bitbucketv1.PullRequest{}, err
		}
		return bitbucketv1.GetPullRequestResponse(resp)
	}

	step("update pull request, version as a JSON string", func() error {
		cur, err := current()
		if err != nil {
			return err
		}
		// The client's EditPullRequestOptions carries version as a string
		// and the target as targetBranchRef: Bitbucket reads the number out
		// of the string.
		resp, err := bb.UpdatePullRequest(P, R, &bitbucketv1.EditPullRequestOptions{
			ID: int64(pr.ID), Version: fmt.Sprint(cur.Version), Title: "Feature, renamed", Description: cur.Description,
		})
		if err != nil {
			return err
		}
		up, err := bitbucketv1.GetPullRequestResponse(resp)
		if err != nil {
			return err
		}
		return expect(up.Title == "Feature, renamed" && up.Version == cur.Version+1, "the new title at the next version, got %+v", up)
	})

	step("list pull requests (paged)", func() error {
		resp, err := bb.GetPullRequestsPage(P, R, map[string]any{"state": "ALL", "limit": 1})
		if err != nil {
			return err
		}
		prs, err := bitbucketv1.GetPullRequestsResponse(resp)
		if err != nil {
			return err
		}
		return expect(len(prs) == 1 && prs[0].ID == pr.ID, "the pull request, got %+v", prs)
	})

	step("decline and reopen, version in the query", func() error {
		cur, err := current()
		if err != nil {
			return err
		}
		if _, err := bb.Decline(P, R, pr.ID, map[string]any{"version": cur.Version}); err != nil {
			return err
		}
		if cur, err = current(); err != nil || cur.State != "DECLINED" {
			return fmt.Errorf("expected DECLINED, got %+v (%v)", cur, err)
		}
		if _, err := bb.Reopen(P, R, pr.ID, map[string]any{"version": cur.Version}); err != nil {
			return err
		}
		cur, err = current()
		return expect(err == nil && cur.State == "OPEN", "OPEN, got %+v (%v)", cur, err)
	})

	step("comment, activities", func() error {
		if _, err := bb.CreatePullRequestComment(P, R, pr.ID, bitbucketv1.Comment{Text: "lgtm"}, []string{"application/json"}); err != nil {
			return err
		}
		resp, err := bb.GetActivities(P, R, pr.ID, map[string]any{"limit": 50})
		if err != nil {
			return err
		}
		acts, err := bitbucketv1.GetActivitiesResponse(resp)
		if err != nil {
			return err
		}
		for _, a := range acts.Values {
			if a.Action == "COMMENTED" && a.Comment.Text == "lgtm" {
				return nil
			}
		}
		var got []string
		for _, a := range acts.Values {
			got = append(got, fmt.Sprintf("{action:%s commentAction:%q comment.text:%q}", a.Action, a.CommentAction, a.Comment.Text))
		}
		return fmt.Errorf("expected a COMMENTED activity carrying its comment, got %v", got)
	})

	step("build status: set, get, stats", func() error {
		cur, err := current()
		if err != nil {
			return err
		}
		sha := cur.FromRef.LatestCommit
		if _, err := bb.SetCommitStatus(sha, bitbucketv1.BuildStatus{State: "SUCCESSFUL", Key: "go-ci", Name: "go ci", Url: "http://ci.invalid/1"}); tr.empty(err) != nil {
			return err
		}
		resp, err := bb.GetCommitStatus(sha)
		if err != nil {
			return err
		}
		statuses, err := bitbucketv1.GetBuildStatusesResponse(resp)
		if err != nil || len(statuses) != 1 || statuses[0].State != "SUCCESSFUL" {
			return fmt.Errorf("expected one SUCCESSFUL build, got %+v (%v)", statuses, err)
		}
		if resp, err = bb.GetCommitStats(sha); err != nil {
			return err
		}
		return expect(fmt.Sprint(resp.Values["successful"]) == "1", "successful: 1, got %v", resp.Values)
	})

	step("can merge, merge with version", func() error {
		resp, err := bb.CanMerge(P, R, pr.ID)
		if err != nil {
			return err
		}
		if resp.Values["canMerge"] != true {
			return fmt.Errorf("expected canMerge, got %v", resp.Values)
		}
		cur, err := current()
		if err != nil {
			return err
		}
		if resp, err = bb.Merge(P, R, pr.ID, map[string]any{"version": cur.Version}, nil, []string{"application/json"}); err != nil {
			return err
		}
		merged, err := bitbucketv1.GetPullRequestResponse(resp)
		return expect(err == nil && merged.State == "MERGED", "MERGED, got %+v (%v)", merged, err)
	})
}
