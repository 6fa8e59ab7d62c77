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
// A data set reaches a node the way an operator's data would: datagen
// writes an import file (NDJSON in the format internal/bulkimport
// documents, loaded by `sluice admin import`) and never touches the
// node's database or repositories itself. `sluice datagen` pipes the
// file straight into the importer; `sluice datagen --out FILE` keeps it
// for a node elsewhere. So the lab depends on no service package, and
// what it measures is loaded through an interface the node documents.
//
// Repositories share objects, because thousands of 14 MB histories would
// not fit a test machine: a few seed histories are generated with git
// fast-import from a deterministic generator (internal/bench's repository
// generator, the same that `make bench` measures) into a history
// directory that outlives the run; the file names each as the "history"
// of one repository, which the importer hard-links, and every other
// repository as a "fork_of" one of them, which the node makes through
// objects/info/alternates at a few kilobytes each. Clients still
// download a full history per clone: sharing is a server-side storage
// detail.
//
// A run is re-runnable: the file always describes the whole data set,
// and the importer skips what exists by natural key (user name, project
// key, KEY/slug, repository and pull request number), so an interrupted
// run is finished by running it again, and the seed histories are
// generated once per history directory.
//
// Load users (load-0001 …) get access tokens — the importer mints them
// and appends them to the tokens file; datagen asks only for those the
// file lacks — and on request SSH keys (keys.go), so the lab can spread
// its clients over many users and the per-user rate limit measures what
// it would in production rather than throttling one user.
package datagen

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluice-scm/sluice/internal/bench"
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
	// TokensFile holds "name token" lines for the load users: the file
	// asks for a token for each load user it lacks (the importer mints
	// them and appends them), so a re-run invalidates nothing.
	TokensFile string
	// KeysFile, when set, gives every load user an SSH key, kept in this
	// file (mode 0600) and registered (see keys.go).
	KeysFile string
	// SeedCache is the directory the seed histories are generated into
	// and kept in, across runs and data sets (e3 provisions many
	// instances); the file names the histories in it by path. Required.
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

// Report says what a run wrote.
type Report struct {
	Planned Counts
	Seeds   int
	// Records is how many lines the import file has.
	Records int
	Took    time.Duration
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

// Write writes the data set to w as an import file for `sluice admin
// import` (the format internal/bulkimport documents), generating the seed
// histories it names into o.SeedCache first. progress, when not nil,
// shows a progress bar; w is written as the records are generated, so a
// pipe to the importer shows the import's progress too.
func Write(ctx context.Context, o Options, w io.Writer, progress io.Writer) (Report, error) {
	start := time.Now()
	if o.Git == "" {
		o.Git = "git"
	}
	if o.Commits == 0 {
		o.Commits = bench.DefaultRepoSpec.Commits
	}
	if o.SeedCache == "" {
		return Report{}, fmt.Errorf("no history directory")
	}
	cache, err := filepath.Abs(o.SeedCache)
	if err != nil {
		return Report{}, err
	}
	o.SeedCache = cache
	counts, err := o.Plan()
	if err != nil {
		return Report{}, err
	}
	if o.Seeds == 0 {
		o.Seeds = min(8, max(1, counts.Repositories/100))
	}
	o.Seeds = min(o.Seeds, counts.Repositories)
	bw := bufio.NewWriterSize(w, 256<<10)
	g := &gen{o: o, c: counts, rep: Report{Planned: counts, Seeds: o.Seeds}, bar: newBar(progress), enc: json.NewEncoder(bw)}
	defer g.bar.done()
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"seed histories", g.seeds},
		{"users", g.users},
		{"groups", g.groups},
		{"load users", g.loadUsers},
		{"projects", g.projects},
		{"repositories", g.repositories},
		{"pull requests", g.pullRequests},
		{"load users' tokens", g.loadTokens},
		{"load users' ssh keys", g.loadUserKeys},
	}
	for _, s := range steps {
		if err := s.fn(ctx); err != nil {
			return g.rep, fmt.Errorf("%s: %w", s.name, err)
		}
		if err := ctx.Err(); err != nil {
			return g.rep, err
		}
	}
	if err := bw.Flush(); err != nil {
		return g.rep, err
	}
	g.rep.Took = time.Since(start)
	return g.rep, nil
}

type gen struct {
	o   Options
	c   Counts
	rep Report
	bar *bar
	enc *json.Encoder

	heads []seedRefs
	paths []string // seed histories, by seed
}

// emit writes one record.
func (g *gen) emit(rec any) error {
	g.rep.Records++
	return g.enc.Encode(rec)
}

// rng returns a generator for one concern, so adding draws to one step
// never changes another step's data.
func (g *gen) rng(stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(g.o.Seed, stream*0x9e3779b97f4a7c15+1))
}

// epoch is the data set's clock: fixed, so rows are identical between runs.
var epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// The import file's records (internal/bulkimport's Record), written with
// only the fields each type uses: the lab shares a format with the node,
// not its code.
type (
	userRec struct {
		Type        string    `json:"type"`
		Name        string    `json:"name"`
		DisplayName string    `json:"display_name"`
		Email       string    `json:"email,omitempty"`
		Password    string    `json:"password,omitempty"`
		Groups      []string  `json:"groups,omitempty"`
		CreatedAt   time.Time `json:"created_at,omitzero"`
	}
	groupRec struct {
		Type    string   `json:"type"`
		Name    string   `json:"name"`
		Members []string `json:"members,omitempty"`
	}
	grantRec struct {
		Group      string `json:"group"`
		Permission string `json:"permission"`
	}
	projectRec struct {
		Type        string     `json:"type"`
		Key         string     `json:"key"`
		Name        string     `json:"name"`
		Description string     `json:"description"`
		Grants      []grantRec `json:"grants"`
		CreatedAt   time.Time  `json:"created_at"`
	}
	repoRec struct {
		Type          string    `json:"type"`
		Project       string    `json:"project"`
		Slug          string    `json:"slug"`
		DefaultBranch string    `json:"default_branch"`
		History       string    `json:"history,omitempty"`
		ForkOf        string    `json:"fork_of,omitempty"`
		CreatedAt     time.Time `json:"created_at"`
	}
	pullRec struct {
		Type        string    `json:"type"`
		Repository  string    `json:"repository"`
		Number      int       `json:"number"`
		FromRef     string    `json:"from_ref"`
		FromSHA     string    `json:"from_sha"`
		ToRef       string    `json:"to_ref"`
		ToSHA       string    `json:"to_sha"`
		BaseSHA     string    `json:"base_sha"`
		Title       string    `json:"title"`
		Description string    `json:"description"`
		State       string    `json:"state"`
		Author      string    `json:"author"`
		CreatedAt   time.Time `json:"created_at"`
	}
	participantRec struct {
		User   string `json:"user"`
		Role   string `json:"role"`
		Status string `json:"status"`
	}
	commentRec struct {
		Author    string    `json:"author"`
		Text      string    `json:"text"`
		CreatedAt time.Time `json:"created_at"`
	}
	activityRec struct {
		Type         string           `json:"type"`
		Repository   string           `json:"repository"`
		Number       int              `json:"number"`
		Participants []participantRec `json:"participants"`
		Comments     []commentRec     `json:"comments,omitempty"`
	}
	tokenRec struct {
		Type  string `json:"type"`
		User  string `json:"user"`
		Label string `json:"label"`
		Scope string `json:"scope"`
	}
	keyRec struct {
		Type      string `json:"type"`
		User      string `json:"user"`
		Label     string `json:"label"`
		PublicKey string `json:"public_key"`
	}
)

func (g *gen) users(context.Context) error {
	g.bar.stage("users", g.c.Users)
	for i := range g.c.Users {
		// Generated users have no password: they only need to exist (as
		// authors, reviewers, members) and argon2id per row would take
		// hours at scale 1.
		if err := g.emit(userRec{Type: "user", Name: UserName(i), DisplayName: fmt.Sprintf("User %d", i),
			Email: UserName(i) + "@example.com", CreatedAt: epoch.Add(time.Duration(i) * time.Minute)}); err != nil {
			return err
		}
		g.bar.set(i + 1)
	}
	return nil
}

func groupName(i int) string { return fmt.Sprintf("group-%06d", i) }

func (g *gen) groups(context.Context) error {
	g.bar.stage("groups", g.c.Groups)
	r := g.rng(2)
	for i := range g.c.Groups {
		k := 2 + r.IntN(6)
		seen := map[int]bool{}
		var members []string
		for range k {
			u := r.IntN(g.c.Users)
			if !seen[u] {
				seen[u] = true
				members = append(members, UserName(u))
			}
		}
		if err := g.emit(groupRec{Type: "group", Name: groupName(i), Members: members}); err != nil {
			return err
		}
		g.bar.set(i + 1)
	}
	return g.emit(groupRec{Type: "group", Name: LoadGroup})
}

func (g *gen) projects(context.Context) error {
	// Each project: PROJECT_WRITE for one group, PROJECT_READ for
	// another, and PROJECT_WRITE for the load group.
	g.bar.stage("projects", g.c.Projects)
	r := g.rng(3)
	for i := range g.c.Projects {
		a, b := groupName(r.IntN(g.c.Groups)), groupName(r.IntN(g.c.Groups))
		grants := []grantRec{{LoadGroup, "PROJECT_WRITE"}, {a, "PROJECT_WRITE"}}
		if b != a {
			grants = append(grants, grantRec{b, "PROJECT_READ"})
		}
		if err := g.emit(projectRec{Type: "project", Key: ProjectKey(i), Name: fmt.Sprintf("Project %d", i),
			Description: "generated by sluice datagen", Grants: grants, CreatedAt: epoch.Add(time.Duration(i) * time.Hour)}); err != nil {
			return err
		}
		g.bar.set(i + 1)
	}
	return nil
}

// seedRefs is what pull requests need from a seed history.
type seedRefs struct {
	main   string
	topics []topic
}

type topic struct{ ref, sha, base string }

// seeds generates (or finds in the cache) the seed histories and reads
// the refs pull requests point at.
func (g *gen) seeds(ctx context.Context) error {
	g.bar.stage("seed histories", g.o.Seeds)
	g.heads = make([]seedRefs, g.o.Seeds)
	g.paths = make([]string, g.o.Seeds)
	for i := range g.o.Seeds {
		path, err := g.seed(ctx, i)
		if err != nil {
			return fmt.Errorf("seed %d: %w", i, err)
		}
		g.paths[i] = path
		if g.heads[i], err = g.readSeed(ctx, path); err != nil {
			return err
		}
		g.bar.set(i + 1)
	}
	return nil
}

// seed returns the path of seed history i, generating it when the cache
// does not hold it. The refs are packed, so the history is one pack and
// one packed-refs file: what the importer links.
func (g *gen) seed(ctx context.Context, i int) (string, error) {
	spec := bench.RepoSpec{Commits: g.o.Commits, Files: bench.DefaultRepoSpec.Files, Seed: g.o.Seed*1000 + uint64(i) + 1}
	cached := filepath.Join(g.o.SeedCache, fmt.Sprintf("seed-%d-c%d-f%d.git", spec.Seed, spec.Commits, spec.Files))
	if _, err := os.Stat(filepath.Join(cached, "packed-refs")); err == nil {
		return cached, nil
	}
	if err := os.MkdirAll(g.o.SeedCache, 0o755); err != nil {
		return "", err
	}
	tmp := cached + fmt.Sprintf(".tmp-%d", os.Getpid())
	os.RemoveAll(tmp)
	if err := bench.GenerateRepo(ctx, g.o.Git, tmp, spec); err != nil {
		return "", err
	}
	if _, err := g.git(ctx, tmp, "pack-refs", "--all", "--prune"); err != nil {
		return "", err
	}
	return cached, os.Rename(tmp, cached)
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

// repoKey is repository i's "KEY/slug".
func (g *gen) repoKey(i int) string { return ProjectKey(i%g.c.Projects) + "/" + RepoSlug(i) }

func (g *gen) repositories(context.Context) error {
	// Seeds first: every other repository is a fork of one of them.
	g.bar.stage("repositories", g.c.Repositories)
	for i := range g.c.Repositories {
		rec := repoRec{Type: "repository", Project: ProjectKey(i % g.c.Projects), Slug: RepoSlug(i), DefaultBranch: "main",
			CreatedAt: epoch.Add(time.Duration(i) * time.Minute)}
		if i < g.o.Seeds {
			rec.History = g.paths[i]
		} else {
			rec.ForkOf = g.repoKey(i % g.o.Seeds)
		}
		if err := g.emit(rec); err != nil {
			return err
		}
		g.bar.set(i + 1)
	}
	return nil
}

var prWords = strings.Fields("fix add remove refactor improve speed up handle support clean update rename document test cache index parser server client limit")

func (g *gen) pullRequests(context.Context) error {
	// Pull request k targets repository k % repositories and is numbered
	// by how many came before it there; only seeds with topic branches
	// can host one. All of them come before any activity, so the
	// importer reads the new pull requests' ids once.
	r := g.rng(5)
	authors := make([]int, 0, g.c.PullRequests)
	g.bar.stage("pull requests", g.c.PullRequests)
	for k := range g.c.PullRequests {
		ri := k % g.c.Repositories
		num := k/g.c.Repositories + 1
		seed := g.heads[ri%g.o.Seeds]
		state := "OPEN"
		switch x := r.IntN(10); {
		case x < 6:
			state = "MERGED"
		case x < 7:
			state = "DECLINED"
		}
		author := r.IntN(g.c.Users)
		title := fmt.Sprintf("%s %s %s", prWords[r.IntN(len(prWords))], prWords[r.IntN(len(prWords))], prWords[r.IntN(len(prWords))])
		g.bar.set(k + 1)
		if len(seed.topics) == 0 {
			authors = append(authors, -1)
			continue
		}
		t := seed.topics[r.IntN(len(seed.topics))]
		if err := g.emit(pullRec{Type: "pull_request", Repository: g.repoKey(ri), Number: num, FromRef: t.ref, FromSHA: t.sha,
			ToRef: "refs/heads/main", ToSHA: seed.main, BaseSHA: t.base, Title: title, Description: "Generated by sluice datagen.",
			State: state, Author: UserName(author), CreatedAt: epoch.Add(time.Duration(k) * time.Minute)}); err != nil {
			return err
		}
		authors = append(authors, author)
	}
	// Reviewers and comments.
	r = g.rng(6)
	g.bar.stage("reviewers and comments", g.c.PullRequests)
	for k := range g.c.PullRequests {
		ri := k % g.c.Repositories
		num := k/g.c.Repositories + 1
		nRev := 1 + r.IntN(3)
		// Spread the planned total exactly: pull request k gets the
		// comments between k·perPR and (k+1)·perPR.
		nCom := (k+1)*g.c.Comments/g.c.PullRequests - k*g.c.Comments/g.c.PullRequests
		revs := make([]int, nRev)
		for j := range revs {
			revs[j] = r.IntN(g.c.Users)
		}
		g.bar.set(k + 1)
		if authors[k] < 0 {
			continue
		}
		rec := activityRec{Type: "pull_request_activity", Repository: g.repoKey(ri), Number: num,
			Participants: []participantRec{{UserName(authors[k]), "AUTHOR", "UNAPPROVED"}}}
		seen := map[int]bool{authors[k]: true}
		for _, u := range revs {
			if seen[u] {
				continue
			}
			seen[u] = true
			status := "UNAPPROVED"
			if r.IntN(2) == 0 {
				status = "APPROVED"
			}
			rec.Participants = append(rec.Participants, participantRec{UserName(u), "REVIEWER", status})
		}
		for c := range nCom {
			rec.Comments = append(rec.Comments, commentRec{Author: UserName(revs[c%len(revs)]),
				Text:      fmt.Sprintf("Review note %d: %s %s.", c+1, prWords[r.IntN(len(prWords))], prWords[r.IntN(len(prWords))]),
				CreatedAt: epoch.Add(time.Duration(k)*time.Minute + time.Duration(c)*time.Second)})
		}
		if err := g.emit(rec); err != nil {
			return err
		}
	}
	return nil
}

func (g *gen) loadUsers(context.Context) error {
	g.bar.stage("load users", g.o.LoadUsers)
	for i := 1; i <= g.o.LoadUsers; i++ {
		name := LoadUserName(i)
		if err := g.emit(userRec{Type: "user", Name: name, DisplayName: "Load " + name, Password: g.o.LoadPassword,
			Groups: []string{LoadGroup}}); err != nil {
			return err
		}
		g.bar.set(i)
	}
	return nil
}

// loadTokens asks for a write token for every load user the tokens file
// has none for; the importer appends the new ones to the file, so a
// re-run mints nothing and invalidates nothing.
func (g *gen) loadTokens(context.Context) error {
	if g.o.LoadUsers == 0 {
		return nil
	}
	existing := readTokens(g.o.TokensFile)
	for i := 1; i <= g.o.LoadUsers; i++ {
		if name := LoadUserName(i); existing[name] == "" {
			if err := g.emit(tokenRec{Type: "token", User: name, Label: "e3 load", Scope: "write"}); err != nil {
				return err
			}
		}
	}
	return nil
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

// DiskUsage is the apparent size of the files under dir, hard links
// counted once: what a data set's repositories take.
func DiskUsage(dir string) int64 {
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
