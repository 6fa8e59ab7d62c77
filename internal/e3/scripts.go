package e3

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluice-scm/sluice/internal/loadgen"
)

// driver is what every client of one thread shares.
type driver struct {
	in   *instance
	lg   *loadgen.Client
	hc   *http.Client
	pick func(r *rand.Rand) int
	rec  atomic.Pointer[recorder]
	tmp  string // scratch for the real git client
	seq  atomic.Int64
	// okOps and failedOps count every operation of the thread, for the
	// progress line and the per-second series.
	okOps, failedOps atomic.Int64
	// ssh holds an SSH client per load user (its key), by user name.
	ssh map[string]*loadgen.SSHClient
}

// client is one simulated user running one script.
type client struct {
	d      *driver
	id     int
	script Script
	user   string
	pass   string
	rng    *rand.Rand
	// seen is the ref tips this client last saw per repository: its
	// haves for the next fetch.
	seen map[int][]string
}

// newPicker returns how clients choose a repository: uniformly, or by a
// Zipf law (rank r with probability ∝ 1/r^s) so a few repositories take
// most of the traffic, as on real instances (CI hammering the monorepo).
func newPicker(n int, popularity string, s float64) func(*rand.Rand) int {
	if popularity != "zipf" || n < 2 {
		return func(r *rand.Rand) int { return r.IntN(n) }
	}
	if s == 0 {
		s = 1
	}
	cdf := make([]float64, n)
	total := 0.0
	for i := range n {
		total += 1 / math.Pow(float64(i+1), s)
		cdf[i] = total
	}
	return func(r *rand.Rand) int {
		x := r.Float64() * total
		lo, hi := 0, n-1
		for lo < hi {
			m := (lo + hi) / 2
			if cdf[m] < x {
				lo = m + 1
			} else {
				hi = m
			}
		}
		return lo
	}
}

// run repeats the script until ctx ends.
func (c *client) run(ctx context.Context) {
	if c.script.Script == "build-agent" {
		c.buildAgent(ctx)
		return
	}
	for ctx.Err() == nil {
		c.iteration(ctx)
		if c.script.Think.Duration > 0 {
			sleep(ctx, c.script.Think.Duration)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// do times one operation and records it unless the run was stopping: an
// operation cut off by the end of the run is not a server error.
func (c *client) do(ctx context.Context, op string, fn func() (int64, error)) error {
	t0 := time.Now()
	n, err := fn()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	c.d.rec.Load().record(op, time.Since(t0), n, err)
	if err != nil {
		c.d.failedOps.Add(1)
		if rateLimited(err) {
			// A well-behaved client waits before trying again (Sluice
			// answers 429 with Retry-After: 1 for a refill of one token).
			sleep(ctx, time.Second)
		}
	} else {
		c.d.okOps.Add(1)
	}
	return err
}

// rateLimited says whether err is the server's per-user rate limit.
func rateLimited(err error) bool {
	var he *loadgen.HTTPError
	if errors.As(err, &he) && he.Status == http.StatusTooManyRequests {
		return true
	}
	return strings.Contains(err.Error(), "http 429") || strings.Contains(err.Error(), "rate limit exceeded")
}

func (c *client) proto() loadgen.Protocol {
	if c.script.Protocol == "v0" {
		return loadgen.V0
	}
	return loadgen.V2
}

func (c *client) repoURL(i int) string {
	u, _ := url.Parse(c.d.in.base)
	u.User = url.UserPassword(c.user, c.pass)
	u.Path = c.d.in.repos[i].path()
	return u.String()
}

func (c *client) iteration(ctx context.Context) {
	// Each iteration acts as one of the load users, picked at random:
	// a closed-loop client stands for many people each doing a little,
	// so the per-user rate limit sees per-user rates like production's
	// rather than one user hammering.
	cred := c.d.in.creds[c.rng.IntN(len(c.d.in.creds))]
	c.user, c.pass = cred[0], cred[1]
	ri := c.d.pick(c.rng)
	switch c.script.Script {
	case "clone":
		c.clone(ctx, ri)
	case "fetch":
		c.fetch(ctx, ri)
	case "ls-remote":
		c.lsRemote(ctx, ri)
	case "push":
		branch, opts := fmt.Sprintf("e3/client-%d", c.id), loadgen.PushOptions{FileSize: 2048}
		if sc, err := c.sshClient(); sc != nil || err != nil {
			c.do(ctx, "ssh push", func() (int64, error) {
				if err != nil {
					return 0, err
				}
				res, err := sc.Push(ctx, c.d.in.repos[ri].sshPath(), branch, opts)
				return res.PackBytes + res.Bytes, err
			})
			return
		}
		c.do(ctx, "push", func() (int64, error) {
			res, err := c.d.lg.Push(ctx, c.repoURL(ri), branch, opts)
			return res.PackBytes + res.Bytes, err
		})
	case "browse":
		c.browse(ctx, ri)
	case "view-pr":
		c.viewPR(ctx, ri)
	case "pr-workflow":
		c.prWorkflow(ctx, ri)
	case "list-users":
		c.do(ctx, "rest: list users", func() (int64, error) {
			return c.get(ctx, fmt.Sprintf("/rest/api/1.0/users?filter=user-%d&limit=25", c.rng.IntN(100)), nil)
		})
	case "shallow-view":
		r := c.d.in.repos[ri]
		c.do(ctx, "rest: browse file", func() (int64, error) {
			var tree struct {
				Children struct {
					Values []struct {
						Path struct {
							ToString string `json:"toString"`
						} `json:"path"`
						Type string `json:"type"`
					} `json:"values"`
				} `json:"children"`
			}
			n, err := c.get(ctx, c.repoAPI(r)+"/browse?limit=50", &tree)
			if err != nil {
				return n, err
			}
			for _, v := range tree.Children.Values {
				if v.Type == "FILE" {
					m, err := c.get(ctx, c.repoAPI(r)+"/raw/"+v.Path.ToString, nil)
					return n + m, err
				}
			}
			return n, nil
		})
	}
}

// sshClient is the SSH client of the load user this iteration acts as;
// nil when the script runs over HTTP.
func (c *client) sshClient() (*loadgen.SSHClient, error) {
	if c.script.Transport != "ssh" {
		return nil, nil
	}
	if sc := c.d.ssh[c.user]; sc != nil {
		return sc, nil
	}
	return nil, fmt.Errorf("no ssh key for user %q", c.user)
}

func (c *client) clone(ctx context.Context, ri int) {
	if c.script.Client == "git" {
		c.realGit(ctx, "git clone", ri)
		return
	}
	if sc, err := c.sshClient(); sc != nil || err != nil {
		c.do(ctx, "ssh clone", func() (int64, error) {
			if err != nil {
				return 0, err
			}
			res, err := sc.Clone(ctx, c.d.in.repos[ri].sshPath(), loadgen.CloneOptions{Protocol: c.proto()})
			return res.Bytes, err
		})
		return
	}
	c.do(ctx, "clone", func() (int64, error) {
		res, err := c.d.lg.Clone(ctx, c.repoURL(ri), loadgen.CloneOptions{Protocol: c.proto()})
		return res.Bytes, err
	})
}

func (c *client) lsRemote(ctx context.Context, ri int) {
	if c.script.Client == "git" {
		c.realGit(ctx, "git ls-remote", ri)
		return
	}
	sc, serr := c.sshClient()
	op := "ls-remote"
	if sc != nil || serr != nil {
		op = "ssh ls-remote"
	}
	c.do(ctx, op, func() (int64, error) {
		if serr != nil {
			return 0, serr
		}
		var refs []loadgen.Ref
		var err error
		if sc != nil {
			refs, err = sc.LsRemote(ctx, c.d.in.repos[ri].sshPath(), c.proto())
		} else {
			refs, err = c.d.lg.LsRemote(ctx, c.repoURL(ri), c.proto())
		}
		if err == nil {
			c.remember(ri, refs)
		}
		return 0, err
	})
}

// fetch asks for every branch and tag with the tips this client saw last
// time as haves, as a CI agent's incremental fetch does. A client that
// never saw the repository learns its tips first (ls-remote, recorded as
// such), so a fetch always has haves.
func (c *client) fetch(ctx context.Context, ri int) {
	if c.script.Client == "git" {
		c.realGit(ctx, "git fetch", ri)
		return
	}
	haves, ok := c.seen[ri]
	if !ok {
		c.lsRemote(ctx, ri)
		return
	}
	sc, serr := c.sshClient()
	if sc != nil || serr != nil {
		// Over SSH the fetch's own session advertises the tips; the next
		// fetch's haves come from the ls-remote a client runs between
		// fetches, as over HTTP.
		c.do(ctx, "ssh fetch", func() (int64, error) {
			if serr != nil {
				return 0, serr
			}
			path := c.d.in.repos[ri].sshPath()
			res, err := sc.Fetch(ctx, path, loadgen.FetchOptions{Protocol: c.proto(), Haves: haves})
			if err == nil {
				if refs, lerr := sc.LsRemote(ctx, path, c.proto()); lerr == nil {
					c.remember(ri, refs)
				}
			}
			return res.Bytes, err
		})
		return
	}
	c.do(ctx, "fetch", func() (int64, error) {
		res, err := c.d.lg.Fetch(ctx, c.repoURL(ri), loadgen.FetchOptions{Protocol: c.proto(), Haves: haves})
		if err == nil {
			refs, lerr := c.d.lg.LsRemote(ctx, c.repoURL(ri), c.proto())
			if lerr == nil {
				c.remember(ri, refs)
			}
		}
		return res.Bytes, err
	})
}

// maxHaves bounds the haves sent: git itself sends at most a few hundred
// per round.
const maxHaves = 64

func (c *client) remember(ri int, refs []loadgen.Ref) {
	var tips []string
	for _, r := range refs {
		if strings.HasPrefix(r.Name, "refs/heads/") && len(tips) < maxHaves {
			tips = append(tips, r.OID)
		}
	}
	c.seen[ri] = tips
}

// buildAgent is Bitbucket E3's build agent: it polls with ls-remote every
// 5 s and clones every 30 s.
func (c *client) buildAgent(ctx context.Context) {
	ri := c.d.pick(c.rng)
	// Spread the agents' schedules so they do not poll in lockstep.
	sleep(ctx, time.Duration(c.rng.Int64N(int64(5*time.Second))))
	lastClone := time.Time{}
	for ctx.Err() == nil {
		if time.Since(lastClone) >= 30*time.Second {
			lastClone = time.Now()
			c.clone(ctx, ri)
		} else {
			c.lsRemote(ctx, ri)
		}
		sleep(ctx, 5*time.Second)
	}
}

// realGit runs the real git client, which also unpacks and indexes on
// this machine: for realism checks, not for load.
func (c *client) realGit(ctx context.Context, op string, ri int) {
	c.do(ctx, op, func() (int64, error) {
		dir := filepath.Join(c.d.tmp, fmt.Sprintf("c%d-%d", c.id, c.d.seq.Add(1)))
		defer os.RemoveAll(dir)
		var args []string
		switch op {
		case "git clone", "git fetch":
			// A fetch into an empty repository is a clone without checkout.
			args = []string{"clone", "--bare", "--quiet", c.repoURL(ri), dir}
		case "git ls-remote":
			args = []string{"ls-remote", c.repoURL(ri)}
		}
		cmd := exec.CommandContext(ctx, "git", append([]string{"-c", "protocol.version=" + strings.TrimPrefix(orDefault(c.script.Protocol, "v2"), "v")}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return 0, fmt.Errorf("%s: %v: %s", op, err, strings.TrimSpace(stderr.String()))
		}
		return int64(len(out)), nil
	})
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func (c *client) repoAPI(r repoRef) string {
	return "/rest/api/1.0/projects/" + url.PathEscape(r.Key) + "/repos/" + url.PathEscape(r.Slug)
}

// browse is a user finding their way to a repository's content.
func (c *client) browse(ctx context.Context, ri int) {
	r := c.d.in.repos[ri]
	steps := []struct{ op, path string }{
		{"rest: list projects", "/rest/api/1.0/projects?limit=25"},
		{"rest: project repos", "/rest/api/1.0/projects/" + url.PathEscape(r.Key) + "/repos?limit=25"},
		{"rest: repository", c.repoAPI(r)},
		{"rest: browse root", c.repoAPI(r) + "/browse?limit=100"},
		{"rest: commits", c.repoAPI(r) + "/commits?limit=25"},
	}
	for _, s := range steps {
		if c.do(ctx, s.op, func() (int64, error) { return c.get(ctx, s.path, nil) }) != nil {
			return
		}
	}
}

// topicBranch picks one of the repository's topic branches (the data
// set's pull request sources).
func (c *client) topicBranch(ctx context.Context, r repoRef) (string, error) {
	var page struct {
		Values []struct {
			DisplayID string `json:"displayId"`
		} `json:"values"`
	}
	if err := c.do(ctx, "rest: branches", func() (int64, error) {
		return c.get(ctx, c.repoAPI(r)+"/branches?filterText=topic&limit=25", &page)
	}); err != nil {
		return "", err
	}
	if len(page.Values) == 0 {
		return "", errors.New("no topic branch")
	}
	return page.Values[c.rng.IntN(len(page.Values))].DisplayID, nil
}

// viewPR is what opening a pull request costs: its commits and its diff
// (source branch against the target, from their merge base).
func (c *client) viewPR(ctx context.Context, ri int) {
	r := c.d.in.repos[ri]
	br, err := c.topicBranch(ctx, r)
	if err != nil {
		return
	}
	q := "?from=" + url.QueryEscape(br) + "&to=main"
	if c.do(ctx, "rest: pr commits", func() (int64, error) { return c.get(ctx, c.repoAPI(r)+"/compare/commits"+q+"&limit=25", nil) }) != nil {
		return
	}
	c.do(ctx, "rest: pr diff", func() (int64, error) { return c.get(ctx, c.repoAPI(r)+"/compare/diff"+q, nil) })
}

// prWorkflow is a developer's round: create a branch, compare it, delete
// it (the write side of the pull request screens).
func (c *client) prWorkflow(ctx context.Context, ri int) {
	r := c.d.in.repos[ri]
	name := fmt.Sprintf("e3/pr-%d-%d", c.id, c.d.seq.Add(1))
	body, _ := json.Marshal(map[string]string{"name": name, "startPoint": "main"})
	if c.do(ctx, "rest: create branch", func() (int64, error) {
		return c.send(ctx, "POST", c.repoAPI(r)+"/branches", body)
	}) != nil {
		return
	}
	c.do(ctx, "rest: pr commits", func() (int64, error) {
		return c.get(ctx, c.repoAPI(r)+"/compare/commits?from="+url.QueryEscape(name)+"&to=main&limit=25", nil)
	})
	del, _ := json.Marshal(map[string]any{"name": "refs/heads/" + name, "dryRun": false})
	c.do(ctx, "rest: delete branch", func() (int64, error) {
		return c.send(ctx, "DELETE", "/rest/branch-utils/1.0/projects/"+url.PathEscape(r.Key)+"/repos/"+url.PathEscape(r.Slug)+"/branches", del)
	})
}

// maxREST bounds a REST response read: a diff can be large, and the
// client must not be the one running out of memory.
const maxREST = 32 << 20

func (c *client) get(ctx context.Context, path string, into any) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", c.d.in.base+path, nil)
	if err != nil {
		return 0, err
	}
	return c.call(req, into)
}

func (c *client) send(ctx context.Context, method, path string, body []byte) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.d.in.base+path, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	return c.call(req, nil)
}

func (c *client) call(req *http.Request, into any) (int64, error) {
	req.SetBasicAuth(c.user, c.pass)
	req.Header.Set("Accept", "application/json")
	resp, err := c.d.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxREST))
	if err != nil {
		return int64(len(b)), err
	}
	if resp.StatusCode/100 != 2 {
		msg := strings.TrimSpace(string(b))
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return int64(len(b)), fmt.Errorf("%s %s: http %d: %s", req.Method, req.URL.Path, resp.StatusCode, msg)
	}
	if into != nil {
		if err := json.Unmarshal(b, into); err != nil {
			return int64(len(b)), fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, err)
		}
	}
	return int64(len(b)), nil
}
