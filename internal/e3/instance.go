package e3

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sluice-scm/sluice/internal/bench"
	"github.com/sluice-scm/sluice/internal/datagen"
	"github.com/sluice-scm/sluice/internal/haproxy"
	"github.com/sluice-scm/sluice/internal/pgserver"
)

// repoRef is one repository the clients may address.
type repoRef struct {
	Key, Slug string
}

func (r repoRef) path() string {
	return "/scm/" + strings.ToLower(r.Key) + "/" + r.Slug + ".git"
}

// sshPath is the repository's path in an SSH exec request, as in
// ssh://git@HOST/key/slug.git.
func (r repoRef) sshPath() string {
	return "/" + strings.ToLower(r.Key) + "/" + r.Slug + ".git"
}

// instance is a deployment under test, ready for clients.
type instance struct {
	base    string // http://host:port clients use
	sshAddr string
	// nodes are the locally started nodes (empty for an existing
	// deployment), metrics their /metrics URLs.
	nodes   []*bench.Server
	metrics []string
	creds   [][2]string
	// keys are the load users' SSH keys by user name (local instances
	// whose workload uses SSH), or the one key of an existing deployment.
	keys  map[string]ssh.Signer
	repos []repoRef
	stops []func() error
	// infra are the local helper processes (PostgreSQL, HAProxy) whose
	// CPU the lab reports apart from the nodes': they share the machine.
	infra []infraProc
}

// infraProc is a helper process measured by its process tree.
type infraProc struct {
	name string
	pid  int
}

func (in *instance) stop() error {
	var errs []error
	for i := len(in.stops) - 1; i >= 0; i-- {
		errs = append(errs, in.stops[i]())
	}
	return errors.Join(errs...)
}

// adminPassword is the bootstrap administrator's password on provisioned
// instances: throw-away instances on 127.0.0.1 only.
const adminPassword = "e3-admin-password"

// provision starts a local instance for thread t in dir.
func provision(ctx context.Context, e *Experiment, t Thread, dir, historyCache string, logger *slog.Logger) (_ *instance, err error) {
	in := &instance{}
	defer func() {
		if err != nil {
			in.stop()
		}
	}()
	inst := t.Instance
	binary := inst.Binary
	if binary == "" {
		if binary, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("find the sluice binary: %w", err)
		}
	}
	shared := filepath.Join(dir, "shared")
	if err := os.MkdirAll(shared, 0o755); err != nil {
		return nil, err
	}
	settings := map[string]string{
		"storage.repositories": filepath.Join(shared, "repositories"),
		"log.level":            "warn",
	}
	if inst.Database == "postgres" {
		pg, err := pgserver.Start(pgserver.Options{MaxConnections: 100 + 40*inst.Nodes, SharedBuffers: "128MB"})
		if err != nil {
			return nil, err
		}
		in.stops = append(in.stops, pg.Stop)
		if pid, err := pg.Pid(); err == nil {
			in.infra = append(in.infra, infraProc{"postgres", pid})
		}
		u, err := pg.CreateDatabase(ctx, "sluice")
		if err != nil {
			return nil, err
		}
		settings["database.url"] = u
	} else {
		settings["database.url"] = "sqlite://" + filepath.Join(shared, "sluice.db")
	}
	if inst.CPUs > 0 {
		// The adaptive throttle sizes its tickets by the node's cores. It
		// reads a cgroup's quota where cpu and cpuacct share a directory,
		// but these machines mount them apart, so it would count the whole
		// machine; tell it the cap instead (an experiment may override).
		settings["throttle.cores"] = strconv.FormatFloat(inst.CPUs, 'g', -1, 64)
	}
	for k, v := range inst.Properties {
		settings[k] = v
	}
	withSSH := inst.SSH || e.workload.NeedsSSH()

	// The data set, with the binary under test.
	ds := e.Dataset
	loadUsers := ds.LoadUsers
	if loadUsers == 0 {
		loadUsers = e.MaxClients()
	}
	tokens := filepath.Join(dir, "tokens")
	args := []string{"datagen", "--data", filepath.Join(dir, "datagen"),
		"--profile", ds.Profile, "--scale", strconv.FormatFloat(ds.Scale, 'g', -1, 64),
		"--seed", strconv.FormatUint(max(ds.Seed, 1), 10), "--load-users", strconv.Itoa(loadUsers), "--tokens", tokens}
	if ds.Histories > 0 {
		args = append(args, "--histories", strconv.Itoa(ds.Histories))
	}
	if ds.Commits > 0 {
		args = append(args, "--commits", strconv.Itoa(ds.Commits))
	}
	if historyCache != "" {
		args = append(args, "--history-cache", historyCache)
	}
	keysFile := filepath.Join(dir, "ssh-keys")
	if withSSH {
		args = append(args, "--load-keys", keysFile)
	}
	logger.Info("generating data set", "thread", t.Name, "profile", ds.Profile, "scale", ds.Scale)
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = nodeEnv(settings)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("datagen: %v: %s", err, tailString(stderr.String(), 2000))
	}
	logger.Info("data set ready", "thread", t.Name, "output", lastLine(string(out)))
	if in.creds, err = datagen.ReadTokens(tokens); err != nil {
		return nil, err
	}
	if withSSH {
		if in.keys, err = datagen.ReadKeys(keysFile); err != nil {
			return nil, err
		}
	}
	counts, err := datagen.Options{Profile: ds.Profile, Scale: ds.Scale}.Plan()
	if err != nil {
		return nil, err
	}
	n := counts.Repositories
	if ds.Repositories > 0 {
		n = min(n, ds.Repositories)
	}
	for i := range n {
		in.repos = append(in.repos, repoRef{Key: datagen.ProjectKey(i % counts.Projects), Slug: datagen.RepoSlug(i)})
	}

	// The nodes. The first one migrates the database alone; each is
	// ready (answers /readyz) before the next starts.
	var lbNodes []haproxy.Node
	for i := 1; i <= inst.Nodes; i++ {
		s := map[string]string{"node.id": fmt.Sprintf("node-%d", i)}
		for k, v := range settings {
			s[k] = v
		}
		sshAddr := ""
		if withSSH {
			port, err := bench.FreePort()
			if err != nil {
				return nil, err
			}
			sshAddr = fmt.Sprintf("127.0.0.1:%d", port)
			if inst.Nodes > 1 {
				// HAProxy sends the PROXY header (see deploy/haproxy.cfg).
				s["server.proxy_protocol"] = "true"
				s["server.trusted_proxies"] = "127.0.0.1/32"
			}
		}
		srv, err := bench.StartSluice(ctx, bench.SluiceConfig{
			Binary: binary, Dir: filepath.Join(dir, fmt.Sprintf("node-%d", i)), Settings: s,
			Name: fmt.Sprintf("e3-%s-node%d", cgroupSafe(t.Name), i), SSHAddr: sshAddr, CPULimit: inst.CPUs, NoUser: true,
			Env: []string{"SLUICE_ADMIN_PASSWORD=" + adminPassword},
		}, logger)
		if err != nil {
			return nil, fmt.Errorf("node %d: %w", i, err)
		}
		in.stops = append(in.stops, srv.Stop)
		in.nodes = append(in.nodes, srv)
		in.metrics = append(in.metrics, srv.Base()+"/metrics")
		lbNodes = append(lbNodes, haproxy.Node{Name: fmt.Sprintf("node-%d", i), HTTPAddr: strings.TrimPrefix(srv.Base(), "http://"), SSHAddr: sshAddr})
	}
	in.base = in.nodes[0].Base()
	in.sshAddr = lbNodes[0].SSHAddr
	if inst.Nodes > 1 {
		if err := in.startHAProxy(ctx, dir, lbNodes, withSSH); err != nil {
			return nil, err
		}
	}
	return in, nil
}

// startHAProxy puts HAProxy in front of the nodes (internal/haproxy, the
// cluster tests' configuration: deploy/haproxy.cfg's shape, leastconn)
// and waits until it has marked every node up, so the first stage does
// not run on fewer nodes than the thread names.
func (in *instance) startHAProxy(ctx context.Context, dir string, nodes []haproxy.Node, withSSH bool) error {
	port, err := bench.FreePort()
	if err != nil {
		return err
	}
	cfg := haproxy.Config{HTTPAddr: fmt.Sprintf("127.0.0.1:%d", port), Nodes: nodes}
	if withSSH {
		sshPort, err := bench.FreePort()
		if err != nil {
			return err
		}
		cfg.SSHAddr = fmt.Sprintf("127.0.0.1:%d", sshPort)
	}
	lb, err := haproxy.Start(cfg, dir)
	if err != nil {
		return err
	}
	in.stops = append(in.stops, lb.Stop)
	in.infra = append(in.infra, infraProc{"haproxy", lb.Pid()})
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := lb.WaitRouted(wctx, len(nodes)); err != nil {
		return fmt.Errorf("%w: %s", err, lb.LogTail(2000))
	}
	in.base = lb.URL()
	in.sshAddr = lb.SSHAddr()
	return nil
}

// connect attaches to an existing deployment.
func connect(ctx context.Context, e *Experiment, t Thread) (*instance, error) {
	inst := t.Instance
	u, err := url.Parse(inst.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("instance url %q: want http(s)://host[:port]", inst.URL)
	}
	in := &instance{base: strings.TrimRight(inst.URL, "/"), metrics: inst.Metrics,
		creds: [][2]string{{inst.Username, inst.Password}}}
	if inst.SSHURL != "" {
		su, err := url.Parse(inst.SSHURL)
		if err != nil || su.Host == "" {
			return nil, fmt.Errorf("instance ssh %q: want ssh://host:port", inst.SSHURL)
		}
		in.sshAddr = su.Host
	}
	if inst.SSHKey != "" {
		b, err := os.ReadFile(inst.SSHKey)
		if err != nil {
			return nil, fmt.Errorf("instance ssh_key: %w", err)
		}
		signer, err := ssh.ParsePrivateKey(b)
		if err != nil {
			return nil, fmt.Errorf("instance ssh_key %s: %w", inst.SSHKey, err)
		}
		in.keys = map[string]ssh.Signer{inst.Username: signer}
	}
	if len(in.metrics) == 0 {
		in.metrics = []string{in.base + "/metrics"}
	}
	// The repositories: every one the user can see, in listing order
	// (rank 1 is the most popular under Zipf).
	hc := &http.Client{Timeout: 30 * time.Second}
	for start := 0; ; {
		req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/rest/api/1.0/repos?start=%d&limit=1000", in.base, start), nil)
		req.SetBasicAuth(inst.Username, inst.Password)
		resp, err := hc.Do(req)
		if err != nil {
			return nil, fmt.Errorf("list repositories: %w", err)
		}
		var page struct {
			Values []struct {
				Slug    string `json:"slug"`
				Project struct {
					Key string `json:"key"`
				} `json:"project"`
			} `json:"values"`
			IsLastPage    bool `json:"isLastPage"`
			NextPageStart int  `json:"nextPageStart"`
		}
		err = json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&page)
		resp.Body.Close()
		if resp.StatusCode != 200 || err != nil {
			return nil, fmt.Errorf("list repositories: http %d: %v", resp.StatusCode, err)
		}
		for _, v := range page.Values {
			in.repos = append(in.repos, repoRef{Key: v.Project.Key, Slug: v.Slug})
		}
		if page.IsLastPage || len(page.Values) == 0 || (e.Dataset.Repositories > 0 && len(in.repos) >= e.Dataset.Repositories) {
			break
		}
		start = page.NextPageStart
	}
	if e.Dataset.Repositories > 0 && len(in.repos) > e.Dataset.Repositories {
		in.repos = in.repos[:e.Dataset.Repositories]
	}
	if len(in.repos) == 0 {
		return nil, errors.New("the deployment lists no repositories for this user")
	}
	return in, nil
}

// nodeEnv is the environment of a sluice process: ours without SLUICE_*
// (the operator's settings must not leak in), plus settings.
func nodeEnv(settings map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLUICE_") {
			env = append(env, kv)
		}
	}
	for k, v := range settings {
		env = append(env, "SLUICE_"+strings.ToUpper(strings.ReplaceAll(k, ".", "_"))+"="+v)
	}
	return append(env, "SLUICE_ADMIN_PASSWORD="+adminPassword)
}

func cgroupSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, s)
}

func tailString(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
