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

	"github.com/jackc/pgx/v5"

	"github.com/sluice-scm/sluice/internal/bench"
	"github.com/sluice-scm/sluice/internal/datagen"
	"github.com/sluice-scm/sluice/internal/pgserver"
)

// HAProxyBinary is Debian's haproxy, put in front of more than one node.
const HAProxyBinary = "/usr/sbin/haproxy"

// repoRef is one repository the clients may address.
type repoRef struct {
	Key, Slug string
}

func (r repoRef) path() string {
	return "/scm/" + strings.ToLower(r.Key) + "/" + r.Slug + ".git"
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
	repos   []repoRef
	stops   []func() error
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
		u, err := createDatabase(ctx, pg.URL(), "sluice")
		if err != nil {
			return nil, err
		}
		settings["database.url"] = u
	} else {
		settings["database.url"] = "sqlite://" + filepath.Join(shared, "sluice.db")
	}
	for k, v := range inst.Properties {
		settings[k] = v
	}

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

	// The nodes.
	var sshAddrs []string
	for i := 1; i <= inst.Nodes; i++ {
		s := map[string]string{"node.id": fmt.Sprintf("node-%d", i)}
		for k, v := range settings {
			s[k] = v
		}
		sshAddr := ""
		if inst.SSH {
			port, err := bench.FreePort()
			if err != nil {
				return nil, err
			}
			sshAddr = fmt.Sprintf("127.0.0.1:%d", port)
			sshAddrs = append(sshAddrs, sshAddr)
			if inst.Nodes > 1 {
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
	}
	in.base = in.nodes[0].Base()
	if len(sshAddrs) > 0 {
		in.sshAddr = sshAddrs[0]
	}
	if inst.Nodes > 1 {
		if err := in.startHAProxy(ctx, dir, t.Name, sshAddrs, logger); err != nil {
			return nil, err
		}
	}
	return in, nil
}

// startHAProxy puts HAProxy in front of the nodes, shaped like
// deploy/haproxy.cfg: HTTP round robin with /readyz checks, and SSH over
// TCP with leastconn and the PROXY protocol.
func (in *instance) startHAProxy(ctx context.Context, dir, thread string, sshAddrs []string, logger *slog.Logger) error {
	port, err := bench.FreePort()
	if err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, `global
    maxconn 4000

defaults
    log stdout format raw local0 warning
    timeout connect 5s
    timeout client 600s
    timeout server 600s
    timeout check 2s
    retries 3
    option redispatch

frontend sluice_http
    mode http
    bind 127.0.0.1:%d
    option forwardfor
    default_backend sluice_http

backend sluice_http
    mode http
    balance leastconn
    option httpchk GET /readyz
    http-check expect status 200
    default-server inter 1s fall 2 rise 1
`, port)
	for i, n := range in.nodes {
		fmt.Fprintf(&b, "    server node%d %s check\n", i+1, strings.TrimPrefix(n.Base(), "http://"))
	}
	if len(sshAddrs) > 0 {
		sshPort, err := bench.FreePort()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "\nfrontend sluice_ssh\n    mode tcp\n    bind 127.0.0.1:%d\n    default_backend sluice_ssh\n\nbackend sluice_ssh\n    mode tcp\n    balance leastconn\n", sshPort)
		for i, a := range sshAddrs {
			fmt.Fprintf(&b, "    server node%d %s send-proxy-v2\n", i+1, a)
		}
		in.sshAddr = fmt.Sprintf("127.0.0.1:%d", sshPort)
	}
	cfg := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(b.String()), 0o600); err != nil {
		return err
	}
	p, err := bench.StartProcess("e3-"+cgroupSafe(thread)+"-haproxy", []string{HAProxyBinary, "-db", "-f", cfg}, os.Environ(), filepath.Join(dir, "haproxy.log"), 0, logger)
	if err != nil {
		return err
	}
	srv := p.Server(fmt.Sprintf("http://127.0.0.1:%d", port))
	in.stops = append(in.stops, srv.Stop)
	in.base = srv.Base()
	// Every node must be routed to before the load starts: wait until the
	// health checks have marked them up (each answers /readyz itself).
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := p.WaitHTTP(ctx, in.base+"/readyz", 200); err != nil {
			return err
		}
		if time.Now().After(deadline) || allUp(in.base, len(in.nodes)) {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// allUp is a heuristic: n consecutive requests succeed through the
// balancer; with leastconn and idle nodes they spread over every server
// that is up.
func allUp(base string, n int) bool {
	c := &http.Client{Timeout: 2 * time.Second}
	for range 2 * n {
		resp, err := c.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return false
		}
	}
	time.Sleep(time.Second) // rise 1 × inter 1s
	return true
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

func createDatabase(ctx context.Context, adminURL, name string) (string, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", fmt.Errorf("connect to postgres: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database: %w", err)
	}
	u, _ := url.Parse(adminURL)
	u.Path = "/" + name
	return u.String(), nil
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
