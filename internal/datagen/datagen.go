// Package datagen builds the performance lab's data sets: users, groups,
// projects, repositories with history, pull requests with reviewers and
// comments, in the proportions of Bitbucket Data Center's load profiles
// (Small, Medium, Large, XLarge; see ../../../shared/REFERENCES.md), scaled
// by a factor so that a laptop can hold a faithful miniature.
//
// Everything is derived from the seed: the same profile, scale and seed
// give the same names, memberships, pull requests and git object ids on
// every machine, so two runs of an experiment load the same data.
//
// Repositories share objects, because thousands of 14 MB histories would
// not fit a test machine: a few seed histories are generated with git
// fast-import from a deterministic generator (internal/bench's repository
// generator, the same that `make bench` measures), and every other
// repository is a fork of one of them through objects/info/alternates
// (repo.Manager.Fork), which costs a few kilobytes. Clients still download
// a full history per clone: sharing is a server-side storage detail.
//
// Rows are bulk-loaded (COPY on PostgreSQL, multi-row INSERTs in one
// transaction on SQLite, see store/bulk.go). A run is re-runnable: it reads
// what exists by natural key (user name, project key, KEY/slug, repository
// and pull request number) and loads only the rest, and a repository whose
// directory already exists is left alone; so an interrupted run is
// finished by running it again.
//
// Load users (load-0001 …) get access tokens written to a file, and on
// request SSH keys (keys.go), so the lab can spread its clients over many
// users and the per-user rate limit measures what it would in production
// rather than throttling one user.
package datagen

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/bench"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
)

// Profile is a Bitbucket Data Center load profile at scale 1.
type Profile struct {
	Name         string
	Users        int
	Groups       int
	Projects     int
	Repositories int
	PullRequests int
	Comments     int
}

// Profiles are Bitbucket's published load profiles (REFERENCES.md: Small ≤
// 6,200 repositories / 3,000 users / 118,000 pull requests; Medium ≤
// 21,000 / 10,000 / 350,000; Large ≤ 52,000 / 25,000 / 850,000 with
// 50,000 groups, 16,700 projects and 3.5 M comments). Only Large publishes
// groups, projects and comments; the others take Large's ratios (2 groups
// per user, 0.32 projects per repository, 4.1 comments per pull request).
// XLarge is "above Large": twice Large here.
var Profiles = map[string]Profile{
	"small":  {Name: "small", Users: 3000, Groups: 6000, Projects: 1990, Repositories: 6200, PullRequests: 118000, Comments: 486000},
	"medium": {Name: "medium", Users: 10000, Groups: 20000, Projects: 6750, Repositories: 21000, PullRequests: 350000, Comments: 1440000},
	"large":  {Name: "large", Users: 25000, Groups: 50000, Projects: 16700, Repositories: 52000, PullRequests: 850000, Comments: 3500000},
	"xlarge": {Name: "xlarge", Users: 50000, Groups: 100000, Projects: 33400, Repositories: 104000, PullRequests: 1700000, Comments: 7000000},
}

// Options describe a data set.
type Options struct {
	Profile string
	Scale   float64
	Seed    uint64
	// Seeds is how many distinct histories the repositories share;
	// default one per 100 repositories, between 1 and 8.
	Seeds int
	// Commits per seed history; default bench.DefaultRepoSpec's 5,500
	// (about 13–14 MB packed, Bitbucket E3's typical repository).
	Commits int
	// LoadUsers is how many load users (load-0001 …) to create with a
	// write token each; 0 creates none.
	LoadUsers int
	// LoadPassword is the load users' password (for the real-git mode
	// and the REST personas that log in); their tokens are preferred.
	LoadPassword string
	// TokensFile receives "name token" lines for the load users (mode
	// 0600); tokens already in it are kept, so a re-run does not
	// invalidate them.
	TokensFile string
	// KeysFile, when set, gives every load user an SSH key, kept in this
	// file (mode 0600) and registered (see keys.go).
	KeysFile string
	// SeedCache keeps generated seed histories across data sets (e3 runs
	// provision many instances); "" generates them in place.
	SeedCache string
	// Git is the git binary; default "git".
	Git string
}

// Counts are the sizes of a data set.
type Counts struct {
	Users, Groups, Projects, Repositories, PullRequests, Comments int
}

// Plan is the scaled profile: at least one of everything.
func (o Options) Plan() (Counts, error) {
	p, ok := Profiles[strings.ToLower(o.Profile)]
	if !ok {
		return Counts{}, fmt.Errorf("unknown profile %q (want small, medium, large or xlarge)", o.Profile)
	}
	if o.Scale <= 0 || o.Scale > 10 {
		return Counts{}, fmt.Errorf("scale %g out of range (0, 10]", o.Scale)
	}
	s := func(n int) int { return max(1, int(math.Round(float64(n)*o.Scale))) }
	return Counts{Users: s(p.Users), Groups: s(p.Groups), Projects: s(p.Projects), Repositories: s(p.Repositories),
		PullRequests: s(p.PullRequests), Comments: s(p.Comments)}, nil
}

// Deps are what a run writes into.
type Deps struct {
	DB     *store.DB
	Repos  *repo.Manager
	Auth   *auth.Service
	Logger *slog.Logger
	// Progress receives the progress bar; nil shows none.
	Progress io.Writer
}

// Report says what a run did.
type Report struct {
	Planned Counts
	// Created counts what this run added; the rest existed.
	Created Counts
	Seeds   int
	// DiskBytes is the repository root's size after the run.
	DiskBytes int64
	Took      time.Duration
}

// ProjectKey, RepoSlug and UserName are the data set's naming scheme, which
// experiments rely on to address repositories without a listing.
func ProjectKey(i int) string   { return fmt.Sprintf("P%05d", i) }
func RepoSlug(i int) string     { return fmt.Sprintf("repo-%06d", i) }
func UserName(i int) string     { return fmt.Sprintf("user-%06d", i) }
func LoadUserName(i int) string { return fmt.Sprintf("load-%04d", i) }

// RepoPath is the path of the i-th repository (0-based) under /scm/.
func RepoPath(counts Counts, i int) string {
	return fmt.Sprintf("/scm/%s/%s.git", strings.ToLower(ProjectKey(i%counts.Projects)), RepoSlug(i))
}

// LoadGroup holds the load users; it has PROJECT_WRITE on every project.
const LoadGroup = "e3-load"

// Generate builds or completes the data set.
func Generate(ctx context.Context, d Deps, o Options) (Report, error) {
	start := time.Now()
	if o.Git == "" {
		o.Git = "git"
	}
	if o.Commits == 0 {
		o.Commits = bench.DefaultRepoSpec.Commits
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	counts, err := o.Plan()
	if err != nil {
		return Report{}, err
	}
	if o.Seeds == 0 {
		o.Seeds = min(8, max(1, counts.Repositories/100))
	}
	o.Seeds = min(o.Seeds, counts.Repositories)
	g := &gen{d: d, o: o, c: counts, rep: Report{Planned: counts, Seeds: o.Seeds}, bar: newBar(d.Progress)}
	defer g.bar.done()
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"users", g.users},
		{"groups", g.groups},
		{"projects", g.projects},
		{"repositories", g.repositories},
		{"pull requests", g.pullRequests},
		{"load users", g.loadUsers},
		{"load users' ssh keys", g.loadUserKeys},
	}
	for _, s := range steps {
		if err := s.fn(ctx); err != nil {
			return g.rep, fmt.Errorf("%s: %w", s.name, err)
		}
	}
	g.rep.DiskBytes = dirSize(filepath.Dir(filepath.Dir(d.Repos.Path(1))))
	g.rep.Took = time.Since(start)
	return g.rep, nil
}

type gen struct {
	d   Deps
	o   Options
	c   Counts
	rep Report
	bar *bar

	userIDs    map[string]int64
	projectIDs map[string]int64
	repos      []int64 // by data set index
	heads      []seedRefs
}

// rng returns a generator for one concern, so adding draws to one step
// never changes another step's data.
func (g *gen) rng(stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(g.o.Seed, stream*0x9e3779b97f4a7c15+1))
}

// epoch is the data set's clock: fixed, so rows are identical between runs.
var epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

const batch = 5000

// load inserts n generated rows in batches, skipping those whose key
// exists, with progress.
func load[T any](ctx context.Context, g *gen, what string, n int, exists func(i int) bool, make func(i int) T, insert func(context.Context, []T) error) (int, error) {
	g.bar.stage(what, n)
	var buf []T
	created := 0
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		if err := insert(ctx, buf); err != nil {
			return err
		}
		created += len(buf)
		buf = buf[:0]
		return nil
	}
	for i := range n {
		if !exists(i) {
			buf = append(buf, make(i))
			if len(buf) == batch {
				if err := flush(); err != nil {
					return created, err
				}
			}
		}
		g.bar.set(i + 1)
	}
	return created, flush()
}

func (g *gen) users(ctx context.Context) error {
	have, err := g.d.DB.NameIDs(ctx, store.BulkUsers)
	if err != nil {
		return err
	}
	// One hash for every generated user: argon2id per row would take
	// hours at scale 1, and these accounts only need to exist. Their
	// password is their name, so nothing secret is shared.
	n, err := load(ctx, g, "users", g.c.Users, func(i int) bool { return have[UserName(i)] != 0 },
		func(i int) store.User {
			return store.User{Name: UserName(i), DisplayName: fmt.Sprintf("User %d", i), Email: UserName(i) + "@example.com",
				Active: true, CreatedAt: epoch.Add(time.Duration(i) * time.Minute)}
		}, g.d.DB.BulkCreateUsers)
	g.rep.Created.Users = n
	if err != nil {
		return err
	}
	g.userIDs, err = g.d.DB.NameIDs(ctx, store.BulkUsers)
	return err
}

func groupName(i int) string { return fmt.Sprintf("group-%06d", i) }

func (g *gen) groups(ctx context.Context) error {
	have, err := g.d.DB.NameIDs(ctx, store.BulkGroups)
	if err != nil {
		return err
	}
	n, err := load(ctx, g, "groups", g.c.Groups, func(i int) bool { return have[groupName(i)] != 0 },
		func(i int) store.Group { return store.Group{Name: groupName(i)} }, g.d.DB.BulkCreateGroups)
	g.rep.Created.Groups = n
	if err != nil {
		return err
	}
	// Memberships of new groups only: a few users each.
	ids, err := g.d.DB.NameIDs(ctx, store.BulkGroups)
	if err != nil {
		return err
	}
	r := g.rng(2)
	var members []store.GroupMember
	for i := range g.c.Groups {
		k := 2 + r.IntN(6)
		seen := map[int64]bool{}
		var batchMembers []store.GroupMember
		for range k {
			u := g.userIDs[UserName(r.IntN(g.c.Users))]
			if !seen[u] {
				seen[u] = true
				batchMembers = append(batchMembers, store.GroupMember{GroupID: ids[groupName(i)], UserID: u})
			}
		}
		if have[groupName(i)] == 0 {
			members = append(members, batchMembers...)
		}
	}
	return g.d.DB.BulkAddGroupMembers(ctx, members)
}

func (g *gen) projects(ctx context.Context) error {
	have, err := g.d.DB.NameIDs(ctx, store.BulkProjects)
	if err != nil {
		return err
	}
	n, err := load(ctx, g, "projects", g.c.Projects, func(i int) bool { return have[ProjectKey(i)] != 0 },
		func(i int) store.Project {
			return store.Project{Key: ProjectKey(i), Name: fmt.Sprintf("Project %d", i), Description: "generated by sluice datagen",
				CreatedAt: epoch.Add(time.Duration(i) * time.Hour)}
		}, g.d.DB.BulkCreateProjects)
	g.rep.Created.Projects = n
	if err != nil {
		return err
	}
	if g.projectIDs, err = g.d.DB.NameIDs(ctx, store.BulkProjects); err != nil {
		return err
	}
	// Each new project: PROJECT_WRITE for one group, PROJECT_READ for
	// another, and PROJECT_WRITE for the load group.
	load, err := g.ensureLoadGroup(ctx)
	if err != nil {
		return err
	}
	groups, err := g.d.DB.NameIDs(ctx, store.BulkGroups)
	if err != nil {
		return err
	}
	r := g.rng(3)
	var grants []store.ProjectGrant
	for i := range g.c.Projects {
		a, b := groups[groupName(r.IntN(g.c.Groups))], groups[groupName(r.IntN(g.c.Groups))]
		if have[ProjectKey(i)] != 0 {
			continue
		}
		pid := g.projectIDs[ProjectKey(i)]
		grants = append(grants, store.ProjectGrant{ProjectID: pid, Grant: store.Grant{GroupID: load, Permission: store.PermProjectWrite}},
			store.ProjectGrant{ProjectID: pid, Grant: store.Grant{GroupID: a, Permission: store.PermProjectWrite}})
		if b != a {
			grants = append(grants, store.ProjectGrant{ProjectID: pid, Grant: store.Grant{GroupID: b, Permission: store.PermProjectRead}})
		}
	}
	return g.d.DB.BulkProjectGrants(ctx, grants)
}

func (g *gen) ensureLoadGroup(ctx context.Context) (int64, error) {
	if grp, err := g.d.DB.GroupByName(ctx, LoadGroup); err == nil {
		return grp.ID, nil
	}
	grp := &store.Group{Name: LoadGroup}
	if err := g.d.DB.CreateGroup(ctx, grp); err != nil {
		return 0, err
	}
	return grp.ID, nil
}

// seedRefs is what pull requests need from a seed history.
type seedRefs struct {
	main   string
	topics []topic
}

type topic struct{ ref, sha, base string }

func (g *gen) repositories(ctx context.Context) error {
	have, err := g.d.DB.NameIDs(ctx, store.BulkRepos)
	if err != nil {
		return err
	}
	key := func(i int) string { return ProjectKey(i%g.c.Projects) + "/" + RepoSlug(i) }
	// Seeds first (their ids are the fork parents), then the forks.
	mk := func(i int) store.Repository {
		return store.Repository{ProjectID: g.projectIDs[ProjectKey(i%g.c.Projects)], Slug: RepoSlug(i), Name: RepoSlug(i),
			DefaultBranch: "main", CreatedAt: epoch.Add(time.Duration(i) * time.Minute)}
	}
	n, err := load(ctx, g, "repository rows (seeds)", g.o.Seeds, func(i int) bool { return have[key(i)] != 0 }, mk, g.d.DB.BulkCreateRepos)
	g.rep.Created.Repositories += n
	if err != nil {
		return err
	}
	ids, err := g.d.DB.NameIDs(ctx, store.BulkRepos)
	if err != nil {
		return err
	}
	g.bar.stage("seed histories", g.o.Seeds)
	for i := range g.o.Seeds {
		if err := g.seed(ctx, i, ids[key(i)]); err != nil {
			return fmt.Errorf("seed %d: %w", i, err)
		}
		g.bar.set(i + 1)
	}
	forks := g.c.Repositories - g.o.Seeds
	n, err = load(ctx, g, "repository rows (forks)", forks, func(i int) bool { return have[key(g.o.Seeds+i)] != 0 },
		func(i int) store.Repository {
			r := mk(g.o.Seeds + i)
			r.ForkOf = ids[key((g.o.Seeds+i)%g.o.Seeds)]
			return r
		}, g.d.DB.BulkCreateRepos)
	g.rep.Created.Repositories += n
	if err != nil {
		return err
	}
	if ids, err = g.d.DB.NameIDs(ctx, store.BulkRepos); err != nil {
		return err
	}
	g.bar.stage("forks on disk", forks)
	g.repos = make([]int64, g.c.Repositories)
	for i := range g.c.Repositories {
		g.repos[i] = ids[key(i)]
		if i < g.o.Seeds {
			continue
		}
		if !g.d.Repos.Exists(g.repos[i]) {
			if err := g.d.Repos.Fork(ctx, g.repos[i%g.o.Seeds], g.repos[i]); err != nil {
				return fmt.Errorf("fork %s: %w", key(i), err)
			}
		}
		g.bar.set(i - g.o.Seeds + 1)
	}
	g.heads = make([]seedRefs, g.o.Seeds)
	for i := range g.o.Seeds {
		if g.heads[i], err = g.readSeed(ctx, g.d.Repos.Path(g.repos[i])); err != nil {
			return err
		}
	}
	return nil
}

// seed makes repository id hold seed history i.
func (g *gen) seed(ctx context.Context, i int, id int64) error {
	dir := g.d.Repos.Path(id)
	if g.d.Repos.Exists(id) {
		if _, err := g.git(ctx, dir, "rev-parse", "--verify", "-q", "refs/heads/main"); err == nil {
			return nil // generated by an earlier run
		}
	} else if err := g.d.Repos.Create(ctx, id, "main"); err != nil {
		return err
	}
	spec := bench.RepoSpec{Commits: g.o.Commits, Files: bench.DefaultRepoSpec.Files, Seed: g.o.Seed*1000 + uint64(i) + 1}
	if g.o.SeedCache == "" {
		return bench.GenerateRepo(ctx, g.o.Git, dir, spec)
	}
	cached := filepath.Join(g.o.SeedCache, fmt.Sprintf("seed-%d-c%d-f%d.git", spec.Seed, spec.Commits, spec.Files))
	if _, err := os.Stat(filepath.Join(cached, "packed-refs")); err != nil {
		tmp := cached + fmt.Sprintf(".tmp-%d", os.Getpid())
		os.RemoveAll(tmp)
		if err := bench.GenerateRepo(ctx, g.o.Git, tmp, spec); err != nil {
			return err
		}
		// One packed-refs file carries every ref into the links below.
		if _, err := g.git(ctx, tmp, "pack-refs", "--all", "--prune"); err != nil {
			return err
		}
		if err := os.Rename(tmp, cached); err != nil {
			return err
		}
	}
	// Packs and refs are immutable once written: hard links cost nothing.
	for _, sub := range []string{"objects/pack", "packed-refs"} {
		if err := linkTree(filepath.Join(cached, sub), filepath.Join(dir, sub)); err != nil {
			return err
		}
	}
	return nil
}

func (g *gen) git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, g.o.Git, append([]string{"-C", dir}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// readSeed reads main and the topic branches with their merge bases.
func (g *gen) readSeed(ctx context.Context, dir string) (seedRefs, error) {
	var s seedRefs
	out, err := g.git(ctx, dir, "for-each-ref", "--format=%(objectname) %(refname)", "refs/heads/")
	if err != nil {
		return s, err
	}
	for _, line := range strings.Split(out, "\n") {
		sha, ref, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if ref == "refs/heads/main" {
			s.main = sha
		} else if strings.HasPrefix(ref, "refs/heads/topic/") {
			s.topics = append(s.topics, topic{ref: ref, sha: sha})
		}
	}
	for k := range s.topics {
		if s.topics[k].base, err = g.git(ctx, dir, "merge-base", "refs/heads/main", s.topics[k].ref); err != nil {
			return s, err
		}
	}
	return s, nil
}

var prWords = strings.Fields("fix add remove refactor improve speed up handle support clean update rename document test cache index parser server client limit")

func (g *gen) pullRequests(ctx context.Context) error {
	have, err := g.d.DB.NameIDs(ctx, store.BulkPullRequests)
	if err != nil {
		return err
	}
	// Pull request k targets repository k % repositories and is numbered
	// by how many came before it there; only seeds with topic branches
	// can host one.
	r := g.rng(5)
	var prs []store.PullRequest
	var authors []int64
	g.bar.stage("pull requests", g.c.PullRequests)
	created := 0
	flush := func() error {
		if err := g.d.DB.BulkCreatePullRequests(ctx, prs); err != nil {
			return err
		}
		created += len(prs)
		prs = prs[:0]
		return nil
	}
	for k := range g.c.PullRequests {
		ri := k % g.c.Repositories
		num := k/g.c.Repositories + 1
		seed := g.heads[ri%g.o.Seeds]
		state := store.PullOpen
		switch x := r.IntN(10); {
		case x < 6:
			state = store.PullMerged
		case x < 7:
			state = store.PullDeclined
		}
		author := g.userIDs[UserName(r.IntN(g.c.Users))]
		title := fmt.Sprintf("%s %s %s", prWords[r.IntN(len(prWords))], prWords[r.IntN(len(prWords))], prWords[r.IntN(len(prWords))])
		g.bar.set(k + 1)
		if len(seed.topics) == 0 || have[fmt.Sprintf("%d/%d", g.repos[ri], num)] != 0 {
			continue
		}
		t := seed.topics[r.IntN(len(seed.topics))]
		prs = append(prs, store.PullRequest{RepoID: g.repos[ri], Number: int64(num), FromRepoID: g.repos[ri], FromRef: t.ref, FromSHA: t.sha,
			ToRef: "refs/heads/main", ToSHA: seed.main, BaseSHA: t.base, Title: title, Description: "Generated by sluice datagen.",
			State: state, AuthorID: author, CreatedAt: epoch.Add(time.Duration(k) * time.Minute)})
		authors = append(authors, author)
		if len(prs) == batch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	g.rep.Created.PullRequests = created
	if created == 0 {
		return nil
	}
	// Reviewers and comments for the pull requests this run created.
	ids, err := g.d.DB.NameIDs(ctx, store.BulkPullRequests)
	if err != nil {
		return err
	}
	r = g.rng(6)
	var parts []store.PullParticipant
	var comments []store.PullComment
	g.bar.stage("reviewers and comments", g.c.PullRequests)
	flushC := func() error {
		if err := g.d.DB.BulkAddParticipants(ctx, parts); err != nil {
			return err
		}
		if err := g.d.DB.BulkCreateComments(ctx, comments); err != nil {
			return err
		}
		g.rep.Created.Comments += len(comments)
		parts, comments = parts[:0], comments[:0]
		return nil
	}
	for k := range g.c.PullRequests {
		ri := k % g.c.Repositories
		num := k/g.c.Repositories + 1
		nRev := 1 + r.IntN(3)
		// Spread the planned total exactly: pull request k gets the
		// comments between k·perPR and (k+1)·perPR.
		nCom := (k+1)*g.c.Comments/g.c.PullRequests - k*g.c.Comments/g.c.PullRequests
		revs := make([]int64, nRev)
		for j := range revs {
			revs[j] = g.userIDs[UserName(r.IntN(g.c.Users))]
		}
		g.bar.set(k + 1)
		id := ids[fmt.Sprintf("%d/%d", g.repos[ri], num)]
		if id == 0 || have[fmt.Sprintf("%d/%d", g.repos[ri], num)] != 0 {
			continue
		}
		seen := map[int64]bool{}
		author := int64(0)
		if len(authors) > 0 {
			author, authors = authors[0], authors[1:]
			seen[author] = true
			parts = append(parts, store.PullParticipant{PRID: id, Participant: store.Participant{UserID: author, Role: store.RoleAuthor, Status: store.StatusUnapproved}})
		}
		for _, u := range revs {
			if seen[u] {
				continue
			}
			seen[u] = true
			status := store.StatusUnapproved
			if r.IntN(2) == 0 {
				status = store.StatusApproved
			}
			parts = append(parts, store.PullParticipant{PRID: id, Participant: store.Participant{UserID: u, Role: store.RoleReviewer, Status: status}})
		}
		for c := range nCom {
			who := revs[c%len(revs)]
			comments = append(comments, store.PullComment{PRID: id, AuthorID: who,
				Text:    fmt.Sprintf("Review note %d: %s %s.", c+1, prWords[r.IntN(len(prWords))], prWords[r.IntN(len(prWords))]),
				Created: epoch.Add(time.Duration(k)*time.Minute + time.Duration(c)*time.Second)})
		}
		if len(comments) >= batch {
			if err := flushC(); err != nil {
				return err
			}
		}
	}
	return flushC()
}

func (g *gen) loadUsers(ctx context.Context) error {
	if g.o.LoadUsers == 0 {
		return nil
	}
	if g.o.TokensFile == "" {
		return fmt.Errorf("load users need a tokens file")
	}
	existing := readTokens(g.o.TokensFile)
	group, err := g.ensureLoadGroup(ctx)
	if err != nil {
		return err
	}
	hash := ""
	if g.o.LoadPassword != "" {
		if hash, err = auth.HashPassword(g.o.LoadPassword); err != nil {
			return err
		}
	}
	g.bar.stage("load users", g.o.LoadUsers)
	f, err := os.OpenFile(g.o.TokensFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	for i := 1; i <= g.o.LoadUsers; i++ {
		name := LoadUserName(i)
		g.bar.set(i)
		if existing[name] != "" {
			continue
		}
		u, err := g.d.DB.UserByName(ctx, name)
		if err != nil {
			u = &store.User{Name: name, DisplayName: "Load " + name, PasswordHash: hash, Active: true}
			if err := g.d.DB.CreateUser(ctx, u); err != nil {
				return err
			}
			if err := g.d.DB.AddGroupMember(ctx, group, u.ID); err != nil {
				return err
			}
		}
		secret, _, err := g.d.Auth.CreateToken(ctx, u.ID, "e3 load", store.ScopeWrite, nil)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(f, "%s %s\n", name, secret); err != nil {
			return err
		}
		g.rep.Created.Users++
	}
	return f.Close()
}

// readTokens reads a tokens file ("name token" lines); missing is empty.
func readTokens(path string) map[string]string {
	m := map[string]string{}
	b, err := os.ReadFile(path)
	if err != nil {
		return m
	}
	for _, line := range strings.Split(string(b), "\n") {
		if name, tok, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
			m[name] = tok
		}
	}
	return m
}

// ReadTokens returns the load users' credentials from a tokens file, in
// user order.
func ReadTokens(path string) ([][2]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out [][2]string
	for _, line := range strings.Split(string(b), "\n") {
		if name, tok, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
			out = append(out, [2]string{name, tok})
		}
	}
	return out, nil
}

// linkTree hard-links src (a file or directory) to dst, copying where
// links are impossible (another filesystem).
func linkTree(src, dst string) error {
	return filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if fi.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if _, err := os.Lstat(target); err == nil {
			return nil
		}
		if err := os.Link(p, target); err == nil {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
}

// dirSize is the apparent size of the files under dir, hard links counted
// once.
func dirSize(dir string) int64 {
	var n int64
	seen := map[uint64]bool{}
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			if ino, ok := inode(fi); ok {
				if seen[ino] {
					return nil
				}
				seen[ino] = true
			}
			n += fi.Size()
		}
		return nil
	})
	return n
}
