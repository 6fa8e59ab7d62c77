// Package config is Sluice's typed configuration.
//
// Values are layered: built-in defaults, then a TOML file (--config), then
// SLUICE_* environment variables, then command-line flags (set by cli on the
// returned struct), then Resolve fills the paths that default from data.dir,
// then Validate. An unknown key in the file or an unknown SLUICE_ variable is
// an error naming it, because a typo that silently does nothing is worse than
// a refusal to start.
//
// Environment names map mechanically: section and key joined by "_", upper
// case, prefixed with SLUICE_: cache.dir <-> SLUICE_CACHE_DIR,
// server.http_addr <-> SLUICE_SERVER_HTTP_ADDR. Lists are comma-separated.
// SLUICE_ADMIN_PASSWORD is not a key: it sets the first admin's password.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/mail"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"
)

// Duration is a time.Duration written as "30s", "5m" in TOML and env.
type Duration struct{ time.Duration }

func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// Size is a byte count written as "2GiB", "512MiB", "1000" in TOML and env.
type Size int64

func (s *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	if err != nil {
		return err
	}
	*s = Size(v)
	return nil
}

func (s Size) MarshalText() ([]byte, error) { return []byte(FormatSize(int64(s))), nil }

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1},
}

// ParseSize parses "2GiB", "10MB", "1024".
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("invalid size %q (want e.g. 512MiB, 2GiB)", s)
	}
	return n * mult, nil
}

// FormatSize writes n with the largest binary unit that divides it.
func FormatSize(n int64) string {
	for _, u := range sizeUnits[:4] {
		if n != 0 && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// Config is the whole configuration. Every field is documented, with its
// default, in docs/configuration.md.
type Config struct {
	Data     Data     `toml:"data"`
	Server   Server   `toml:"server"`
	Database Database `toml:"database"`
	Storage  Storage  `toml:"storage"`
	Cache    Cache    `toml:"cache"`
	Auth     Auth     `toml:"auth"`
	Git      Git      `toml:"git"`
	Throttle Throttle `toml:"throttle"`
	Log      Log      `toml:"log"`
	Node     Node     `toml:"node"`
	Webhooks Webhooks `toml:"webhooks"`
	SMTP     SMTP     `toml:"smtp"`
}

type Data struct {
	// Dir is the base directory the other paths default from.
	Dir string `toml:"dir"`
}

type Server struct {
	HTTPAddr string `toml:"http_addr"`
	SSHAddr  string `toml:"ssh_addr"`
	// BaseURL is how users reach this server (clone URLs, links).
	BaseURL string `toml:"base_url"`
	// SSHBaseURL is the SSH clone URL prefix shown to users.
	SSHBaseURL string `toml:"ssh_base_url"`
	// TrustedProxies lists CIDRs whose X-Forwarded-For/-Proto headers (and
	// PROXY protocol headers on SSH) are believed.
	TrustedProxies []string `toml:"trusted_proxies"`
	// ProxyProtocol enables the PROXY protocol (v1/v2) on the SSH listener
	// for connections from TrustedProxies.
	ProxyProtocol     bool     `toml:"proxy_protocol"`
	ReadHeaderTimeout Duration `toml:"read_header_timeout"`
	IdleTimeout       Duration `toml:"idle_timeout"`
	// BodyTimeout bounds how long a client may take to send a request body.
	BodyTimeout Duration `toml:"body_timeout"`
	// MaxRequestBody bounds non-push request bodies (REST, upload-pack).
	MaxRequestBody  Size     `toml:"max_request_body"`
	ShutdownTimeout Duration `toml:"shutdown_timeout"`
	// SSHIdleTimeout closes SSH connections idle this long.
	SSHIdleTimeout Duration `toml:"ssh_idle_timeout"`
	// SSHMaxSessions bounds sessions per SSH connection.
	SSHMaxSessions int `toml:"ssh_max_sessions"`
	// SSHMaxUnauthenticated bounds concurrent connections still in the
	// handshake or authentication.
	SSHMaxUnauthenticated int `toml:"ssh_max_unauthenticated"`
	// SSHMaxUnauthenticatedPerSource bounds them per client address (the
	// PROXY protocol's behind a trusted proxy), so one host cannot take
	// every slot.
	SSHMaxUnauthenticatedPerSource int `toml:"ssh_max_unauthenticated_per_source"`
	// SSHHandshakeTimeout bounds accept to the end of the SSH key exchange.
	SSHHandshakeTimeout Duration `toml:"ssh_handshake_timeout"`
	// SSHAuthTimeout bounds accept to authenticated (a person may be typing
	// a key's passphrase).
	SSHAuthTimeout Duration `toml:"ssh_auth_timeout"`
}

type Database struct {
	// URL is sqlite://PATH or postgres://…
	URL          string `toml:"url"`
	MaxOpenConns int    `toml:"max_open_conns"`
	// AcquireTimeout bounds a request's wait for a PostgreSQL connection;
	// past it the request fails with 503 (exit 75 over SSH).
	AcquireTimeout Duration `toml:"acquire_timeout"`
}

type Storage struct {
	Repositories string `toml:"repositories"`
}

type Cache struct {
	Dir          string   `toml:"dir"`
	Packs        bool     `toml:"packs"`
	Refs         bool     `toml:"refs"`
	MaxBytes     Size     `toml:"max_bytes"`
	MinFreeBytes Size     `toml:"min_free_bytes"`
	TTL          Duration `toml:"ttl"`
	// MinOccurrences caches a request only from its Nth sight (1 or 2).
	MinOccurrences int `toml:"min_occurrences"`
	// AbandonedTimeout and AbandonedMaxBytes bound a cache producer whose
	// every client has gone (packcache's "Abandoned producers").
	AbandonedTimeout  Duration `toml:"abandoned_timeout"`
	AbandonedMaxBytes Size     `toml:"abandoned_max_bytes"`
}

type Git struct {
	// Binary is the git executable.
	Binary string `toml:"binary"`
	// MaxInputSize is receive.maxInputSize: the largest pack a push may send.
	MaxInputSize Size `toml:"max_input_size"`
	// Timeout bounds one git process.
	Timeout Duration `toml:"timeout"`
	// MaxPushOptions and MaxPushOptionBytes bound push options.
	MaxPushOptions     int `toml:"max_push_options"`
	MaxPushOptionBytes int `toml:"max_push_option_bytes"`
	// HookBinary is the sluice executable git runs as its hooks; empty
	// means this executable.
	HookBinary string `toml:"hook_binary"`
	// HookHelper is the sluice-hook executable (cmd/sluice-hook) git runs
	// as its hooks when present; empty means sluice-hook next to
	// HookBinary, if there is one. Without it, hooks run HookBinary.
	HookHelper string `toml:"hook_helper"`
	// Nice is the niceness of the git processes that serve clones and
	// pushes (0 disables): the node's own requests get the CPU first.
	Nice int `toml:"nice"`
	// ReadMemoryLimit is the address-space limit of each git process that
	// serves browse, diff, blame, archive, merges and pull request diffs.
	ReadMemoryLimit Size `toml:"read_memory_limit"`
	// ReadTimeout bounds each of those processes.
	ReadTimeout Duration `toml:"read_timeout"`
	// MaxDiffBlobSize is the largest file diffed; bigger ones are marked
	// too large to diff.
	MaxDiffBlobSize Size `toml:"max_diff_blob_size"`
	// MaxBlobSize is the largest file a push may add.
	MaxBlobSize Size `toml:"max_blob_size"`
	// MaxTreeDepth is the deepest directory nesting a push may add.
	MaxTreeDepth int `toml:"max_tree_depth"`
	// WantCheckTimeout bounds the walk that proves a protocol v2 fetch's
	// wants reachable from the visible refs; a want not proven in time is
	// refused.
	WantCheckTimeout Duration `toml:"want_check_timeout"`
}

type Throttle struct {
	// Strategy is "adaptive" or "fixed".
	Strategy string `toml:"strategy"`
	// Fixed is the ticket count for the fixed strategy (0: 2 per core).
	Fixed int `toml:"fixed"`
	// MinPerCore and MaxPerCore bound the adaptive ticket limit.
	MinPerCore float64 `toml:"min_per_core"`
	MaxPerCore float64 `toml:"max_per_core"`
	// TargetCPU is the CPU utilisation (0..1) the adaptive strategy holds.
	TargetCPU float64 `toml:"target_cpu"`
	// Cores is the CPU budget of this node (0: what the process may use).
	Cores float64 `toml:"cores"`
	// GitCgroup runs heavy git processes in a child cgroup of the node's
	// own (cgroup v1 cpu), weighted below the node's request handlers
	// and capped by the adaptive controller below its ticket floor.
	GitCgroup  bool     `toml:"git_cgroup"`
	QueueMax   int      `toml:"queue_max"`
	QueueWait  Duration `toml:"queue_wait"`
	RateLimit  bool     `toml:"rate_limit"`
	RateBucket int      `toml:"rate_bucket"`
	RateRefill float64  `toml:"rate_refill"`
}

type Log struct {
	// Level is debug, info, warn or error.
	Level string `toml:"level"`
	// Format is text or json.
	Format string `toml:"format"`
}

type Node struct {
	// ID names this node in the cluster; empty means hostname:http-port.
	ID string `toml:"id"`
	// ReconcileInterval is how often the node looks for ref transactions
	// whose process is gone (or whose end it failed to record) and
	// reconciles them against the refs on disk.
	ReconcileInterval Duration `toml:"reconcile_interval"`
	// AbandonAfter is how old another node's pending ref transaction must
	// be, besides its node being gone, before this node reconciles it.
	AbandonAfter Duration `toml:"abandon_after"`
}

// Auth is authentication and authorization beyond what the database says.
type Auth struct {
	// OutageGrace is how long, during a database outage, a principal the
	// node authenticated and authorized to read a repository before the
	// outage may go on fetching it from the pack cache; 0 disables.
	OutageGrace Duration `toml:"outage_grace"`
}

type Webhooks struct {
	// AllowNetworks lists CIDRs webhooks may reach although they are
	// loopback, private or link-local (refused otherwise, against SSRF).
	AllowNetworks []string `toml:"allow_networks"`
}

// SMTP is the mail server notifications are sent through; an empty Host
// means no email (the in-app inbox still works).
type SMTP struct {
	Host string `toml:"host"`
	Port int    `toml:"port"`
	// From is the sender address of notification mail.
	From string `toml:"from"`
	// Username and Password authenticate (PLAIN, only over TLS or to
	// localhost, as net/smtp insists); empty means no authentication.
	Username string `toml:"username"`
	Password string `toml:"password"`
}

// WebhookAllow parses webhooks.allow_networks (Validate has checked it).
// TrustedProxyNets is server.trusted_proxies parsed, for every transport
// that believes a proxy's word about the client's address (X-Forwarded-For
// over HTTP, the PROXY protocol over SSH): parsed here once, so the two
// cannot read the list differently. Validate refuses a bad entry first.
func (c *Config) TrustedProxyNets() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range c.Server.TrustedProxies {
		if p, err := parsePrefix(s); err == nil {
			out = append(out, p)
		}
	}
	return out
}

func (c *Config) WebhookAllow() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range c.Webhooks.AllowNetworks {
		if p, err := parsePrefix(s); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// parsePrefix reads a CIDR or a single address (as a /32 or /128).
func parsePrefix(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// Default returns the built-in defaults. Paths that derive from data.dir are
// left empty here and filled by Resolve.
func Default() Config {
	return Config{
		Data: Data{Dir: "./data"},
		Server: Server{
			HTTPAddr:              "127.0.0.1:7990",
			SSHAddr:               "127.0.0.1:7999",
			ReadHeaderTimeout:     Duration{10 * time.Second},
			IdleTimeout:           Duration{120 * time.Second},
			BodyTimeout:           Duration{10 * time.Minute},
			MaxRequestBody:        Size(10 << 20),
			ShutdownTimeout:       Duration{30 * time.Second},
			SSHIdleTimeout:        Duration{10 * time.Minute},
			SSHMaxSessions:        10,
			SSHMaxUnauthenticated: 100,
			// A fifth of the total: one address cannot lock the rest out.
			SSHMaxUnauthenticatedPerSource: 20,
			SSHHandshakeTimeout:            Duration{10 * time.Second},
			SSHAuthTimeout:                 Duration{60 * time.Second},
		},
		Database: Database{MaxOpenConns: 20, AcquireTimeout: Duration{5 * time.Second}},
		// Ten minutes rides out a database failover or restart, yet a
		// grant revoked just before the outage is not honoured for long.
		Auth: Auth{OutageGrace: Duration{10 * time.Minute}},
		Cache: Cache{
			Packs:          true,
			Refs:           true,
			MinFreeBytes:   Size(1 << 30),
			TTL:            Duration{time.Hour},
			MinOccurrences: 1,
			// packcache.DefaultAbandonedTimeout and
			// DefaultAbandonedMaxBytes.
			AbandonedTimeout:  Duration{2 * time.Minute},
			AbandonedMaxBytes: Size(1 << 30),
		},
		Git: Git{
			Binary:             "git",
			MaxInputSize:       Size(2 << 30),
			Timeout:            Duration{time.Hour},
			MaxPushOptions:     32,
			MaxPushOptionBytes: 4096,
			Nice:               10,
			// See docs/configuration.md for where each number comes from.
			ReadMemoryLimit:  Size(1 << 30),
			ReadTimeout:      Duration{time.Minute},
			MaxDiffBlobSize:  Size(8 << 20),
			MaxBlobSize:      Size(1 << 30),
			MaxTreeDepth:     2048,
			WantCheckTimeout: Duration{20 * time.Second},
		},
		Throttle: Throttle{
			Strategy:   "adaptive",
			MinPerCore: 1,
			MaxPerCore: 12,
			TargetCPU:  0.75,
			GitCgroup:  true,
			QueueMax:   1000,
			QueueWait:  Duration{5 * time.Minute},
			RateLimit:  true,
			RateBucket: 60,
			RateRefill: 5,
		},
		Log:  Log{Level: "info", Format: "text"},
		SMTP: SMTP{Port: 25},
		// 5 s: a lock or an unannounced move outlives a database outage
		// by seconds; the query behind it reads a table that is empty
		// but for pushes in flight. 70 s: the hook client's own timeout
		// (60 s) and a margin for clock skew between nodes.
		Node: Node{ReconcileInterval: Duration{5 * time.Second}, AbandonAfter: Duration{70 * time.Second}},
	}
}

// Load builds a Config from defaults, the TOML file at path (if non-empty)
// and the environment. Call Resolve and Validate after applying flags.
func Load(path string, environ []string) (Config, error) {
	cfg := Default()
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return cfg, fmt.Errorf("read config: %w", err)
		}
		if err := decodeTOML(b, &cfg); err != nil {
			return cfg, fmt.Errorf("config %s: %w", path, err)
		}
	}
	if err := applyEnv(&cfg, environ); err != nil {
		return cfg, err
	}
	return cfg, nil
}

func decodeTOML(b []byte, cfg *Config) error {
	dec := toml.NewDecoder(bytes.NewReader(b)).DisallowUnknownFields()
	if err := dec.Decode(cfg); err != nil {
		var strict *toml.StrictMissingError
		if errors.As(err, &strict) && len(strict.Errors) > 0 {
			keys := make([]string, 0, len(strict.Errors))
			for _, e := range strict.Errors {
				keys = append(keys, strings.Join(e.Key(), "."))
			}
			return fmt.Errorf("unknown key %s", strings.Join(keys, ", "))
		}
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			return fmt.Errorf("line %d column %d: %s", row, col, de.Error())
		}
		return err
	}
	return nil
}

// EnvName returns the environment variable for a dotted key.
func EnvName(key string) string {
	return "SLUICE_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// notKeys are SLUICE_ variables that are not configuration keys.
var notKeys = map[string]bool{
	"SLUICE_ADMIN_PASSWORD": true,
	"SLUICE_CONFIG":         true,
}

// Keys lists every dotted key in the configuration, in declaration order.
func Keys() []string {
	var keys []string
	walk(reflect.ValueOf(&Config{}).Elem(), "", func(key string, _ reflect.Value) { keys = append(keys, key) })
	return keys
}

func walk(v reflect.Value, prefix string, fn func(key string, field reflect.Value)) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := f.Tag.Get("toml")
		if name == "" || name == "-" {
			continue
		}
		key := name
		if prefix != "" {
			key = prefix + "." + name
		}
		fv := v.Field(i)
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(Duration{}) {
			walk(fv, key, fn)
			continue
		}
		fn(key, fv)
	}
}

func applyEnv(cfg *Config, environ []string) error {
	byEnv := map[string]reflect.Value{}
	walk(reflect.ValueOf(cfg).Elem(), "", func(key string, fv reflect.Value) { byEnv[EnvName(key)] = fv })
	for _, kv := range environ {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, "SLUICE_") || notKeys[name] {
			continue
		}
		fv, known := byEnv[name]
		if !known {
			if strings.HasPrefix(name, "SLUICE_TEST_") || strings.HasPrefix(name, "SLUICE_HOOK_") {
				continue // not configuration: test harness and hook plumbing
			}
			return fmt.Errorf("unknown environment variable %s (no such config key)", name)
		}
		if err := setFromString(fv, val); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// Set sets a dotted key from its string form, as flags and env do.
func (c *Config) Set(key, val string) error {
	var target reflect.Value
	walk(reflect.ValueOf(c).Elem(), "", func(k string, fv reflect.Value) {
		if k == key {
			target = fv
		}
	})
	if !target.IsValid() {
		return fmt.Errorf("unknown config key %q", key)
	}
	return setFromString(target, val)
}

func setFromString(fv reflect.Value, val string) error {
	if u, ok := fv.Addr().Interface().(interface{ UnmarshalText([]byte) error }); ok {
		return u.UnmarshalText([]byte(val))
	}
	switch fv.Kind() {
	case reflect.String:
		fv.SetString(val)
	case reflect.Bool:
		b, err := strconv.ParseBool(val)
		if err != nil {
			return fmt.Errorf("invalid boolean %q", val)
		}
		fv.SetBool(b)
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(val, 10, 64)
		if err != nil {
			return fmt.Errorf("invalid integer %q", val)
		}
		fv.SetInt(n)
	case reflect.Float64:
		n, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return fmt.Errorf("invalid number %q", val)
		}
		fv.SetFloat(n)
	case reflect.Slice:
		var items []string
		for _, s := range strings.Split(val, ",") {
			if s = strings.TrimSpace(s); s != "" {
				items = append(items, s)
			}
		}
		fv.Set(reflect.ValueOf(items))
	default:
		return fmt.Errorf("unsupported type %s", fv.Type())
	}
	return nil
}

// Resolve fills the paths that default from data.dir and makes every path
// absolute, so that later changes of working directory do not move data.
func (c *Config) Resolve() error {
	dir, err := filepath.Abs(c.Data.Dir)
	if err != nil {
		return fmt.Errorf("data.dir: %w", err)
	}
	c.Data.Dir = dir
	if c.Database.URL == "" {
		c.Database.URL = "sqlite://" + filepath.Join(dir, "sluice.db")
	}
	if c.Storage.Repositories == "" {
		c.Storage.Repositories = filepath.Join(dir, "repositories")
	}
	if c.Cache.Dir == "" {
		c.Cache.Dir = filepath.Join(dir, "cache")
	}
	for _, p := range []*string{&c.Storage.Repositories, &c.Cache.Dir} {
		if *p, err = filepath.Abs(*p); err != nil {
			return err
		}
	}
	if c.Server.BaseURL == "" && c.Server.HTTPAddr != "" {
		c.Server.BaseURL = "http://" + c.Server.HTTPAddr
	}
	if c.Server.SSHBaseURL == "" && c.Server.SSHAddr != "" {
		c.Server.SSHBaseURL = "ssh://git@" + c.Server.SSHAddr
	}
	return nil
}

// Validate reports the first invalid value, naming its key.
func (c *Config) Validate() error {
	if c.Server.HTTPAddr == "" {
		return errors.New("server.http_addr: must not be empty")
	}
	for key, addr := range map[string]string{"server.http_addr": c.Server.HTTPAddr, "server.ssh_addr": c.Server.SSHAddr} {
		if addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("%s: %q is not HOST:PORT", key, addr)
		}
	}
	for _, cidr := range c.Server.TrustedProxies {
		if _, err := parsePrefix(cidr); err != nil {
			return fmt.Errorf("server.trusted_proxies: %q is not a CIDR or address", cidr)
		}
	}
	if c.Server.SSHMaxUnauthenticated < 1 || c.Server.SSHMaxUnauthenticatedPerSource < 1 {
		return errors.New("server.ssh_max_unauthenticated, server.ssh_max_unauthenticated_per_source: must be at least 1")
	}
	if c.Server.SSHHandshakeTimeout.Duration <= 0 || c.Server.SSHAuthTimeout.Duration < c.Server.SSHHandshakeTimeout.Duration {
		return errors.New("server.ssh_handshake_timeout, server.ssh_auth_timeout: need 0 < handshake timeout <= auth timeout")
	}
	if !strings.HasPrefix(c.Database.URL, "sqlite://") && !strings.HasPrefix(c.Database.URL, "postgres://") && !strings.HasPrefix(c.Database.URL, "postgresql://") {
		return fmt.Errorf("database.url: %q must start with sqlite:// or postgres://", c.Database.URL)
	}
	if c.Database.MaxOpenConns < 1 {
		return errors.New("database.max_open_conns: must be at least 1")
	}
	if c.Database.AcquireTimeout.Duration <= 0 {
		return errors.New("database.acquire_timeout: must be positive")
	}
	if c.Git.MaxInputSize <= 0 {
		return errors.New("git.max_input_size: must be positive")
	}
	if c.Git.ReadMemoryLimit < 0 || (c.Git.ReadMemoryLimit > 0 && c.Git.ReadMemoryLimit < 64<<20) {
		return errors.New("git.read_memory_limit: must be 0 (no limit) or at least 64MiB, which git needs to start")
	}
	if c.Git.ReadTimeout.Duration < 0 || c.Git.MaxDiffBlobSize < 0 || c.Git.MaxBlobSize < 0 || c.Git.MaxTreeDepth < 0 || c.Git.WantCheckTimeout.Duration < 0 {
		return errors.New("git.read_timeout, git.max_diff_blob_size, git.max_blob_size, git.max_tree_depth, git.want_check_timeout: must not be negative (0: no limit or the default)")
	}
	if c.Git.Nice < 0 || c.Git.Nice > 19 {
		return errors.New("git.nice: must be between 0 and 19")
	}
	if c.Git.MaxPushOptions < 0 || c.Git.MaxPushOptionBytes < 0 {
		return errors.New("git.max_push_options, git.max_push_option_bytes: must not be negative")
	}
	if c.Cache.MinOccurrences < 1 || c.Cache.MinOccurrences > 2 {
		return errors.New("cache.min_occurrences: must be 1 or 2")
	}
	if c.Auth.OutageGrace.Duration < 0 {
		return errors.New("auth.outage_grace: must not be negative (0: no grace)")
	}
	if c.Cache.AbandonedTimeout.Duration < 0 || c.Cache.AbandonedMaxBytes < 0 {
		return errors.New("cache.abandoned_timeout, cache.abandoned_max_bytes: must not be negative (0: the default)")
	}
	switch c.Throttle.Strategy {
	case "adaptive", "fixed":
	default:
		return fmt.Errorf("throttle.strategy: %q must be adaptive or fixed", c.Throttle.Strategy)
	}
	if c.Throttle.TargetCPU <= 0 || c.Throttle.TargetCPU > 1 {
		return errors.New("throttle.target_cpu: must be in (0, 1]")
	}
	if c.Throttle.MinPerCore <= 0 || c.Throttle.MaxPerCore < c.Throttle.MinPerCore {
		return errors.New("throttle.min_per_core, throttle.max_per_core: need 0 < min <= max")
	}
	if c.Throttle.QueueMax < 0 {
		return errors.New("throttle.queue_max: must not be negative")
	}
	if c.Node.ReconcileInterval.Duration <= 0 {
		return errors.New("node.reconcile_interval: must be positive")
	}
	if c.Node.AbandonAfter.Duration < time.Minute {
		return errors.New("node.abandon_after: must be at least 1m (the hook client's timeout), or a live push could lose its ref lock")
	}
	if c.Throttle.RateBucket < 1 || c.Throttle.RateRefill <= 0 {
		return errors.New("throttle.rate_bucket, throttle.rate_refill: must be positive")
	}
	for _, cidr := range c.Webhooks.AllowNetworks {
		if _, err := parsePrefix(cidr); err != nil {
			return fmt.Errorf("webhooks.allow_networks: %q is not a CIDR or address", cidr)
		}
	}
	if c.SMTP.Host != "" {
		if c.SMTP.Port < 1 || c.SMTP.Port > 65535 {
			return errors.New("smtp.port: must be between 1 and 65535")
		}
		if _, err := mail.ParseAddress(c.SMTP.From); err != nil || strings.ContainsAny(c.SMTP.From, "\r\n") {
			return fmt.Errorf("smtp.from: %q is not an email address", c.SMTP.From)
		}
		if (c.SMTP.Username == "") != (c.SMTP.Password == "") {
			return errors.New("smtp.username, smtp.password: set both or neither")
		}
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("log.level: %q must be debug, info, warn or error", c.Log.Level)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		return fmt.Errorf("log.format: %q must be text or json", c.Log.Format)
	}
	return nil
}
