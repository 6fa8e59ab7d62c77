package e3

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Experiment is an experiment file: threads (instances under test), each
// with its stages, all driven by one workload.
type Experiment struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Parallel runs the threads side by side instead of one after another.
	Parallel bool `json:"parallel,omitempty"`
	// Workload is the path of a workload file (relative to the experiment
	// file) or the workload itself.
	Workload json.RawMessage `json:"workload"`
	// Dataset is generated on every locally provisioned instance.
	Dataset Dataset `json:"dataset"`
	// Stages apply to threads that list none of their own.
	Stages  []Stage  `json:"stages,omitempty"`
	Threads []Thread `json:"threads"`
	// Warmup runs before the first stage of each thread, unmeasured.
	Warmup Duration `json:"warmup,omitempty"`
	// Popularity is how clients pick repositories: "uniform" or "zipf"
	// (rank r chosen with probability ∝ 1/r^ZipfS).
	Popularity string  `json:"popularity,omitempty"`
	ZipfS      float64 `json:"zipf_s,omitempty"`

	// workload is the parsed Workload.
	workload Workload
	dir      string
}

// Dataset is the datagen data set of a local instance.
type Dataset struct {
	Profile string  `json:"profile"`
	Scale   float64 `json:"scale"`
	Seed    uint64  `json:"seed,omitempty"`
	// Histories and Commits tune the shared seed histories (see datagen).
	Histories int `json:"histories,omitempty"`
	Commits   int `json:"commits,omitempty"`
	// LoadUsers is how many load users the clients spread over; default
	// the largest stage's client count.
	LoadUsers int `json:"load_users,omitempty"`
	// Repositories limits the load to the first N repositories of the
	// data set (0: all).
	Repositories int `json:"repositories,omitempty"`
}

// Thread is one instance under test and its stages.
type Thread struct {
	Name     string   `json:"name"`
	Instance Instance `json:"instance"`
	Stages   []Stage  `json:"stages,omitempty"`
}

// Instance is a deployment to measure: provisioned locally (Nodes > 0) or
// an existing one (URL set).
type Instance struct {
	Nodes int `json:"nodes,omitempty"`
	// Properties are configuration keys passed to every node as SLUICE_*
	// environment variables: {"cache.packs": "false"}.
	Properties map[string]string `json:"properties,omitempty"`
	// Binary is the sluice executable; default the running one.
	Binary string `json:"binary,omitempty"`
	// CPUs caps each node at this many cores through its cgroup (v1
	// cpu.cfs_quota_us, v2 cpu.max); 0 leaves it uncapped.
	CPUs float64 `json:"cpus,omitempty"`
	// Database is "sqlite" (default; one node only) or "postgres".
	Database string `json:"database,omitempty"`
	// SSH starts an SSH listener on every node (and HAProxy's TCP front);
	// a workload with SSH scripts turns it on by itself.
	SSH bool `json:"enable_ssh,omitempty"`

	// URL, SSHURL, Username and Password name an existing deployment.
	// Every client then uses these credentials: the per-user rate limit
	// must be exempted for that user or it measures the limiter.
	URL      string `json:"url,omitempty"`
	SSHURL   string `json:"ssh,omitempty"`
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	// SSHKey is the path of an unencrypted OpenSSH private key of
	// Username's, for SSH scripts against an existing deployment.
	SSHKey string `json:"ssh_key,omitempty"`
	// Metrics are the nodes' /metrics URLs of an existing deployment.
	Metrics []string `json:"metrics,omitempty"`
}

// Stage is a number of clients held for a duration.
type Stage struct {
	Clients  int      `json:"clients"`
	Duration Duration `json:"duration"`
}

// Duration is a time.Duration written "30s" in JSON.
type Duration struct{ time.Duration }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string like \"30s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// Load reads and validates an experiment file and its workload.
func Load(path string) (*Experiment, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	e, err := Parse(b, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return e, nil
}

// Parse parses an experiment; dir resolves a workload given by path.
func Parse(b []byte, dir string) (*Experiment, error) {
	var e Experiment
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return nil, fmt.Errorf("parse experiment: %w", err)
	}
	e.dir = dir
	wl := bytes.TrimSpace(e.Workload)
	if len(wl) == 0 {
		return nil, errors.New("no workload")
	}
	if wl[0] == '"' {
		var p string
		if err := json.Unmarshal(wl, &p); err != nil {
			return nil, err
		}
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		var err error
		if wl, err = os.ReadFile(p); err != nil {
			return nil, fmt.Errorf("read workload: %w", err)
		}
	}
	w, err := ParseWorkload(wl)
	if err != nil {
		return nil, err
	}
	e.workload = w
	return &e, e.Validate()
}

// Validate checks an experiment; every message names the offending field.
func (e *Experiment) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if e.Name == "" {
		bad("name is empty")
	}
	if len(e.Threads) == 0 {
		bad("no threads")
	}
	switch e.Popularity {
	case "", "uniform", "zipf":
	default:
		bad("popularity %q: want uniform or zipf", e.Popularity)
	}
	if e.ZipfS < 0 || math.IsNaN(e.ZipfS) {
		bad("zipf_s %g must be positive", e.ZipfS)
	}
	local := false
	names := map[string]bool{}
	for i, t := range e.Threads {
		where := fmt.Sprintf("threads[%d]", i)
		if t.Name == "" {
			bad("%s: name is empty", where)
		} else if names[t.Name] {
			bad("%s: duplicate name %q", where, t.Name)
		}
		names[t.Name] = true
		in := t.Instance
		switch {
		case in.URL != "" && in.Nodes > 0:
			bad("%s.instance: give nodes (provision locally) or url (existing deployment), not both", where)
		case in.URL == "" && in.Nodes <= 0:
			bad("%s.instance: nodes must be at least 1 (or give url)", where)
		case in.URL != "" && in.Username == "":
			bad("%s.instance: an existing deployment needs username and password", where)
		}
		if in.Nodes > 0 {
			local = true
		}
		switch in.Database {
		case "", "sqlite":
			if in.Nodes > 1 {
				bad("%s.instance: %d nodes need database \"postgres\" (SQLite is one node's)", where, in.Nodes)
			}
		case "postgres":
		default:
			bad("%s.instance.database %q: want sqlite or postgres", where, in.Database)
		}
		if in.URL != "" && e.workload.NeedsSSH() && (in.SSHURL == "" || in.SSHKey == "") {
			bad("%s.instance: the workload runs scripts over SSH: give ssh (ssh://host:port) and ssh_key", where)
		}
		if in.CPUs < 0 {
			bad("%s.instance.cpus %g must not be negative", where, in.CPUs)
		}
		for k := range in.Properties {
			if k == "" || strings.ContainsAny(k, " =") || !strings.Contains(k, ".") {
				bad("%s.instance.properties: %q is not a configuration key (section.key)", where, k)
			}
		}
		stages := t.Stages
		if len(stages) == 0 {
			stages = e.Stages
		}
		if len(stages) == 0 {
			bad("%s: no stages (here or at the top level)", where)
		}
		for j, s := range stages {
			if s.Clients < 1 {
				bad("%s.stages[%d].clients %d must be at least 1", where, j, s.Clients)
			}
			if s.Duration.Duration < time.Second {
				bad("%s.stages[%d].duration %s must be at least 1s", where, j, s.Duration)
			}
		}
	}
	if local {
		if _, ok := profileNames[strings.ToLower(e.Dataset.Profile)]; !ok {
			bad("dataset.profile %q: want small, medium, large or xlarge", e.Dataset.Profile)
		}
		if e.Dataset.Scale <= 0 {
			bad("dataset.scale %g must be positive", e.Dataset.Scale)
		}
	}
	return errors.Join(errs...)
}

var profileNames = map[string]bool{"small": true, "medium": true, "large": true, "xlarge": true}

// StagesOf returns the thread's stages, or the experiment's.
func (e *Experiment) StagesOf(t Thread) []Stage {
	if len(t.Stages) > 0 {
		return t.Stages
	}
	return e.Stages
}

// Workload returns the parsed workload.
func (e *Experiment) WorkloadSpec() Workload { return e.workload }

// MaxClients is the largest client count of any stage.
func (e *Experiment) MaxClients() int {
	n := 0
	for _, t := range e.Threads {
		for _, s := range e.StagesOf(t) {
			n = max(n, s.Clients)
		}
	}
	return n
}
