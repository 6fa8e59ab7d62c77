package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// SluiceConfig describes the Sluice node under test.
type SluiceConfig struct {
	// Binary is the built sluice executable.
	Binary string
	// Dir is the data directory (data.dir) and holds the log.
	Dir string
	// User and Password are created as an administrator.
	User, Password string
	// Settings are extra configuration keys, passed as SLUICE_*
	// environment variables: {"cache.packs": "false"}.
	Settings map[string]string
	// Name names the process and its cgroup; default "sluice". Nodes
	// started side by side need distinct names.
	Name string
	// SSHAddr is server.ssh_addr; empty runs no SSH listener.
	SSHAddr string
	// CPULimit caps the node's process tree at this many cores (0: no cap).
	CPULimit float64
	// NoUser skips creating User (the data set already holds the users).
	NoUser bool
	// Env is extra environment (NAME=value) for every sluice command,
	// e.g. SLUICE_ADMIN_PASSWORD.
	Env []string
}

// env is the environment of every sluice command: the caller's, minus its
// SLUICE_* variables (an unknown one is a configuration error, and the
// operator's settings must not leak into the measurement), plus Settings.
func (c SluiceConfig) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLUICE_") {
			env = append(env, kv)
		}
	}
	for k, v := range c.Settings {
		env = append(env, "SLUICE_"+strings.ToUpper(strings.ReplaceAll(k, ".", "_"))+"="+v)
	}
	return append(env, c.Env...)
}

// Admin runs `sluice admin ARGS… --data DIR` and returns its standard
// output (a token, for `token create`).
func (c SluiceConfig) Admin(ctx context.Context, args ...string) (string, error) {
	argv := append([]string{"admin"}, args...)
	argv = append(argv, "--data", c.Dir)
	cmd := exec.CommandContext(ctx, c.Binary, argv...)
	cmd.Env = c.env()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("sluice %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// StartSluice starts `sluice serve` on a free port and creates the user.
func StartSluice(ctx context.Context, cfg SluiceConfig, logger *slog.Logger) (*Server, error) {
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	// No SSH listener unless asked for: the benchmark is HTTP only, and a
	// second fixed port could collide with another node on the machine.
	name := cfg.Name
	if name == "" {
		name = "sluice"
	}
	p, err := startProcLimited(name, []string{cfg.Binary, "serve", "--data", cfg.Dir, "--http-addr", addr, "--ssh-addr", cfg.SSHAddr},
		cfg.env(), filepath.Join(cfg.Dir, name+".log"), cfg.CPULimit, logger)
	if err != nil {
		return nil, err
	}
	s := &Server{Name: name, base: "http://" + addr, user: cfg.User, pass: cfg.Password, procs: []*proc{p}}
	if err := waitHTTP(ctx, s.base+"/readyz", p, 200); err != nil {
		s.Stop()
		return nil, fmt.Errorf("%w (log: %s)", err, tail(filepath.Join(cfg.Dir, name+".log")))
	}
	if cfg.NoUser {
		return s, nil
	}
	if _, err := cfg.Admin(ctx, "user", "create", "--username", cfg.User, "--password", cfg.Password, "--admin"); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// tail returns the end of a log file for an error message.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}
