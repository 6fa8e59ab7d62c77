package api

import (
	"strings"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
)

// The files resource and single tags: what stashy's repo.files(),
// atlassian-python-api's get_file_list and Jenkins' tag lookups call.
//
// files answers a page of plain path strings, every file below the named
// directory (the root by default) at any depth, relative to it, which is
// what Bitbucket returns; at names the revision as in browse.

func (s *server) fileRoutes() []route {
	at := q("at", "commit id or ref; default: the default branch")
	return []route{
		{Method: "GET", Pattern: repository + "/files", Summary: "Paths of every file in the repository, at any depth", Paged: true,
			Query: []param{at}, handle: (*call).listFiles},
		{Method: "GET", Pattern: repository + "/files/{path...}", Summary: "Paths of every file below a directory, relative to it", Paged: true,
			Query: []param{at}, handle: (*call).listFiles},
		{Method: "GET", Pattern: repository + "/tags/{name...}", Summary: "Get a tag", handle: (*call).getTag},
		{Method: "GET", Pattern: gitBase + "/tags/{name...}", Summary: "Get a tag", handle: (*call).getTag},
	}
}

func (c *call) listFiles() error {
	_, r, err := c.repoFor(auth.Read)
	if err != nil {
		return err
	}
	pg, err := c.page()
	if err != nil {
		return err
	}
	p, err := cleanRepoPath("path", c.path("path"))
	if err != nil {
		return err
	}
	sha, _, err := c.atOrDefault(r, "at")
	if err != nil {
		return err
	}
	files, more, err := c.s.Repos.Files(c.ctx, r.ID, sha, p, pg.Start, pg.Limit)
	if err != nil {
		return err
	}
	out := pageJSON[string]{Size: len(files), Limit: pg.Limit, Start: pg.Start, IsLastPage: !more, Values: files}
	if more {
		next := pg.Start + len(files)
		out.NextPageStart = &next
	}
	return c.json(out)
}

func (c *call) getTag() error {
	_, r, err := c.repoFor(auth.Read)
	if err != nil {
		return err
	}
	name := c.path("name")
	ref, err := tagRef("name", name)
	if err != nil {
		// A name no tag can have names no tag.
		return problem.New(problem.NotFound, "tag %s not found", quoteShort(name))
	}
	t, err := c.s.Repos.Tag(c.ctx, r.ID, strings.TrimPrefix(ref, "refs/tags/"))
	if err != nil {
		return err
	}
	return c.json(refOf(t, "TAG"))
}
