package api

import (
	"strings"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
)

// Bitbucket's branch and tag listings take orderBy (ALPHABETICAL, the
// default, or MODIFICATION: most recently committed first, which is how
// CI plugins find the branches worth building) and, for branches,
// details=true, which adds per-branch metadata under Bitbucket's plugin
// keys. Sluice fills the two it can answer honestly: ahead/behind the
// default branch and the latest commit.

const (
	metaAheadBehind  = "com.atlassian.bitbucket.server.bitbucket-branch:ahead-behind-metadata-provider"
	metaLatestCommit = "com.atlassian.bitbucket.server.bitbucket-branch:latest-commit-metadata"
)

func refListParams(what string) []param {
	return []param{
		q("filterText", "only "+what+" whose name contains this text"),
		q("orderBy", "ALPHABETICAL (default) or MODIFICATION (most recently committed first)"),
	}
}

// refOrder reads orderBy.
func (c *call) refOrder() (repo.RefOrder, error) {
	switch v := c.query("orderBy"); strings.ToUpper(v) {
	case "", "ALPHABETICAL":
		return repo.OrderByName, nil
	case "MODIFICATION":
		return repo.OrderByModification, nil
	default:
		return 0, problem.New(problem.Invalid, "query parameter orderBy must be ALPHABETICAL or MODIFICATION, not %s", quoteShort(v))
	}
}

type aheadBehindJSON struct {
	Ahead  int `json:"ahead"`
	Behind int `json:"behind"`
}

// detailedRefJSON is a ref with Bitbucket's metadata map.
type detailedRefJSON struct {
	refJSON
	Metadata map[string]any `json:"metadata"`
}

// branchDetails adds the metadata to a page of branches: one commit read
// and one ahead/behind count per branch, bounded by the page size.
func (c *call) branchDetails(r *store.Repository, page pageJSON[refJSON], refs []repo.Ref) (pageJSON[detailedRefJSON], error) {
	base, err := c.refCommit(r, "refs/heads/"+r.DefaultBranch)
	if err != nil {
		return pageJSON[detailedRefJSON]{}, err
	}
	out := pageJSON[detailedRefJSON]{Size: page.Size, Limit: page.Limit, Start: page.Start, IsLastPage: page.IsLastPage,
		NextPageStart: page.NextPageStart, Values: make([]detailedRefJSON, len(page.Values))}
	for i, v := range page.Values {
		meta := map[string]any{}
		tip := refs[i].LatestCommit
		commit, err := c.s.Repos.Commit(c.ctx, r.ID, tip)
		if err != nil {
			return out, err
		}
		meta[metaLatestCommit] = commitOf(*commit)
		// An empty default branch has nothing to compare with.
		if base != "" {
			ahead, behind, err := c.s.Repos.AheadBehind(c.ctx, r.ID, base, tip)
			if err != nil {
				return out, err
			}
			meta[metaAheadBehind] = aheadBehindJSON{Ahead: ahead, Behind: behind}
		}
		out.Values[i] = detailedRefJSON{refJSON: v, Metadata: meta}
	}
	return out, nil
}
