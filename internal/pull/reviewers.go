package pull

import (
	"context"
	"fmt"
	"strings"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/branchperm"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
)

// Default reviewers, as Bitbucket's conditions: a condition of a
// repository, or of a project (then of each of its repositories), names
// a source branch matcher, a target branch matcher, users and how many of
// them must approve. A pull request opened without reviewers gets the
// users of every condition its branches match, and each such condition
// with required approvals is a merge check. Opened with reviewers, the
// author has chosen (Renovate asks …/reviewers first and sends those), so
// nothing is added; the merge check applies either way, because it is
// the repository's rule, not the author's.
//
// Only users who can read the target repository are ever added or
// returned: a condition outlives grants, and a reviewer who lost access
// must not be invited to (and mailed about) a repository they cannot see.
// The required approvals count approvals of the condition's users who
// still can.

// Matcher kinds: BRANCH and PATTERN are branch permissions' (branchperm),
// the others are reviewer conditions' only.
const (
	MatchBranch        = branchperm.MatchBranch
	MatchPattern       = branchperm.MatchPattern
	MatchAnyRef        = "ANY_REF"        // every branch
	MatchModelBranch   = "MODEL_BRANCH"   // the branching model's development or production branch
	MatchModelCategory = "MODEL_CATEGORY" // a branch type of the branching model: feature, bugfix, hotfix, release
	// AnyRefID is the id Bitbucket gives its any-ref matcher.
	AnyRefID = "ANY_REF_MATCHER_ID"
)

// Sluice has no configurable branching model yet, so the model matchers
// use Bitbucket's default model: development is the repository's default
// branch, production is unset (it matches nothing), and each category is
// a branch name prefix.
var modelCategories = map[string]string{"feature": "feature/", "bugfix": "bugfix/", "hotfix": "hotfix/", "release": "release/"}

// MaxConditionReviewers bounds the users of one condition. Bitbucket sets
// no documented bound; 100 keeps a condition's row and the pull request
// creation that adds them small while far above any real review group.
const MaxConditionReviewers = 100

// ValidRefMatcher checks a matcher and puts it in its stored form: an
// exact branch as its full ref, ANY_REF with Bitbucket's id.
func ValidRefMatcher(m *store.RefMatcher) error {
	switch m.Type {
	case MatchBranch:
		short := strings.TrimPrefix(m.ID, "refs/heads/")
		if err := repo.ValidateBranchName(short); err != nil {
			return err
		}
		m.ID = "refs/heads/" + short
	case MatchPattern:
		if m.ID == "" {
			return problem.New(problem.Invalid, "a pattern matcher needs a pattern")
		}
		return branchperm.ValidPattern(m.ID)
	case MatchAnyRef:
		m.ID = AnyRefID
	case MatchModelBranch:
		m.ID = strings.ToLower(m.ID)
		if m.ID != "development" && m.ID != "production" {
			return problem.New(problem.Invalid, "invalid model branch %q (development or production)", m.ID)
		}
	case MatchModelCategory:
		m.ID = strings.ToLower(m.ID)
		if _, ok := modelCategories[m.ID]; !ok {
			return problem.New(problem.Invalid, "invalid branch type %q (feature, bugfix, hotfix or release)", m.ID)
		}
	default:
		return problem.New(problem.Invalid, "invalid matcher type %q (BRANCH, PATTERN, ANY_REF, MODEL_BRANCH or MODEL_CATEGORY)", m.Type)
	}
	return nil
}

// refMatches reports whether ref (a full branch ref) of repository r
// matches m.
func refMatches(m store.RefMatcher, r *store.Repository, ref string) bool {
	switch m.Type {
	case MatchBranch:
		return m.ID == ref
	case MatchPattern:
		return branchperm.MatchRef(m.ID, ref)
	case MatchAnyRef:
		return true
	case MatchModelBranch:
		return m.ID == "development" && r.DefaultBranch != "" && ref == "refs/heads/"+r.DefaultBranch
	case MatchModelCategory:
		return strings.HasPrefix(shortRef(ref), modelCategories[m.ID])
	}
	return false
}

func checkCondition(c *store.ReviewerCondition) error {
	if err := ValidRefMatcher(&c.Source); err != nil {
		return err
	}
	if err := ValidRefMatcher(&c.Target); err != nil {
		return err
	}
	if len(c.Reviewers) == 0 {
		return problem.New(problem.Invalid, "a default reviewer condition needs at least one reviewer")
	}
	if len(c.Reviewers) > MaxConditionReviewers {
		return problem.New(problem.Invalid, "a condition names at most %d reviewers", MaxConditionReviewers)
	}
	seen := map[int64]bool{}
	var ids []int64
	for _, id := range c.Reviewers {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	c.Reviewers = ids
	if c.RequiredApprovals < 0 || c.RequiredApprovals > len(ids) {
		return problem.New(problem.Invalid, "required approvals must be between 0 and the number of reviewers (%d)", len(ids))
	}
	return nil
}

// ReviewerConditions lists the conditions of one scope: a repository
// (projectID 0) or a project (repoID 0).
func (s *Service) ReviewerConditions(ctx context.Context, repoID, projectID int64) ([]store.ReviewerCondition, error) {
	return s.ps.ReviewerConditions(ctx, repoID, projectID)
}

// CreateReviewerCondition validates and stores c. The transport has
// checked that c's reviewers can read the scope.
func (s *Service) CreateReviewerCondition(ctx context.Context, c *store.ReviewerCondition) error {
	if err := checkCondition(c); err != nil {
		return err
	}
	return s.ps.CreateReviewerCondition(ctx, c)
}

// UpdateReviewerCondition replaces condition c.ID of c's scope.
func (s *Service) UpdateReviewerCondition(ctx context.Context, c *store.ReviewerCondition) error {
	if err := checkCondition(c); err != nil {
		return err
	}
	return s.ps.UpdateReviewerCondition(ctx, c)
}

// DeleteReviewerCondition removes condition id of a scope.
func (s *Service) DeleteReviewerCondition(ctx context.Context, repoID, projectID, id int64) error {
	return s.ps.DeleteReviewerCondition(ctx, repoID, projectID, id)
}

// matchingConditions lists target's conditions (its own and its
// project's) that a pull request from fromRef to toRef matches.
func (s *Service) matchingConditions(ctx context.Context, target *store.Repository, fromRef, toRef string) ([]store.ReviewerCondition, error) {
	all, err := s.ps.ReviewerConditionsFor(ctx, target.ID, target.ProjectID)
	if err != nil {
		return nil, err
	}
	var out []store.ReviewerCondition
	for _, c := range all {
		if refMatches(c.Source, target, fromRef) && refMatches(c.Target, target, toRef) {
			out = append(out, c)
		}
	}
	return out, nil
}

// DefaultReviewers lists the users the conditions of target add to a
// pull request from fromRef to toRef (branch names or full refs), each
// once, in condition order, leaving out users who cannot read target.
// The source repository does not change the answer: conditions belong
// to the target.
func (s *Service) DefaultReviewers(ctx context.Context, target *store.Repository, fromRef, toRef string) ([]int64, error) {
	from, err := branchRef(fromRef)
	if err != nil {
		return nil, err
	}
	to, err := branchRef(toRef)
	if err != nil {
		return nil, err
	}
	cs, err := s.matchingConditions(ctx, target, from, to)
	if err != nil {
		return nil, err
	}
	seen := map[int64]bool{}
	var ids []int64
	for _, c := range cs {
		for _, id := range c.Reviewers {
			if seen[id] {
				continue
			}
			seen[id] = true
			if s.canRead(ctx, id, target) {
				ids = append(ids, id)
			}
		}
	}
	return ids, nil
}

// defaultReviewerChecks is the required approvals merge check: one veto
// per matching condition whose reviewers gave fewer approvals than it
// requires.
func (s *Service) defaultReviewerChecks(ctx context.Context, target *store.Repository, pr *store.PullRequest) ([]Veto, error) {
	cs, err := s.matchingConditions(ctx, target, pr.FromRef, pr.ToRef)
	if err != nil {
		return nil, err
	}
	var parts []store.Participant
	var vetoes []Veto
	for _, c := range cs {
		if c.RequiredApprovals == 0 {
			continue
		}
		if parts == nil {
			if parts, err = s.ps.Participants(ctx, pr.ID); err != nil {
				return nil, err
			}
		}
		approved := 0
		for _, pt := range parts {
			if pt.Role != store.RoleAuthor && pt.Status == store.StatusApproved && contains(c.Reviewers, pt.UserID) &&
				s.canRead(ctx, pt.UserID, target) {
				approved++
			}
		}
		if approved < c.RequiredApprovals {
			vetoes = append(vetoes, Veto{"Default reviewer approvals",
				fmt.Sprintf("%d approval(s) from the default reviewers of condition #%d required, %d given", c.RequiredApprovals, c.ID, approved)})
		}
	}
	return vetoes, nil
}

// ReviewerConditionsFor lists the conditions that apply to r: its own
// and its project's, oldest first.
func (s *Service) ReviewerConditionsFor(ctx context.Context, r *store.Repository) ([]store.ReviewerCondition, error) {
	return s.ps.ReviewerConditionsFor(ctx, r.ID, r.ProjectID)
}

// canRead asks auth, when the service has it, whether the user (active)
// may still read the repository.
func (s *Service) canRead(ctx context.Context, userID int64, r *store.Repository) bool {
	u, err := s.st.UserByID(ctx, userID)
	if err != nil || !u.Active {
		return false
	}
	if s.auth == nil {
		return true
	}
	res := auth.Resource{Repo: r}
	if proj, err := s.st.ProjectByID(ctx, r.ProjectID); err == nil {
		res.Project = proj
	}
	return s.auth.Authorize(ctx, &auth.Principal{UserID: u.ID, Name: u.Name}, res, auth.Read) == nil
}
