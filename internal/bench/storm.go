package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-scm/sluice/internal/loadgen"
)

// NewHTTPClient is a keep-alive client like loadgen's, for the requests
// loadgen does not make (a static file, REST, /metrics).
func NewHTTPClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		MaxIdleConnsPerHost: max(conns, 2),
		DisableCompression:  true,
	}, Timeout: 5 * time.Minute}
}

// StormCloneOp is the clone storm's operation: a full v2 clone whose pack
// is checked by fingerprint (loadgen.VerifyFingerprint) rather than
// hashed with SHA-1 every time. Every row of the storm uses it, or
// StaticOp, which checks the same way; see the storm section's notes for
// why.
func StormCloneOp(c *loadgen.Client, url string) loadgen.Op {
	return func(ctx context.Context, _ int) (int64, error) {
		res, err := c.Clone(ctx, url, loadgen.CloneOptions{Protocol: loadgen.V2, Verify: loadgen.VerifyFingerprint})
		return res.Bytes, err
	}
}

// staticBufs are StaticOp's read buffers: one large read straight from
// the connection per call, as the load client reads a pack.
var staticBufs = sync.Pool{New: func() any {
	b := make([]byte, 256<<10)
	return &b
}}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// StaticOp fetches url, the static file WriteStaticFile wrote with size
// bytes, and checks it as the storm's clones check a pack: its length and
// the CRC-32C of every byte must be the file's (computed here, once, from
// the same generator). The floor costs the client what a clone does.
func StaticOp(c *http.Client, url string, size int64) loadgen.Op {
	h := crc32.New(castagnoli)
	writeStaticContent(h, size)
	want := h.Sum32()
	return func(ctx context.Context, _ int) (int64, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, err
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("get static file: http %d", resp.StatusCode)
		}
		bp := staticBufs.Get().(*[]byte)
		defer staticBufs.Put(bp)
		var n int64
		var crc uint32
		for {
			k, rerr := resp.Body.Read(*bp)
			crc = crc32.Update(crc, castagnoli, (*bp)[:k])
			n += int64(k)
			if rerr == io.EOF {
				break
			}
			if rerr != nil {
				return n, rerr
			}
		}
		switch {
		case n != size:
			return n, fmt.Errorf("get static file: %d of %d bytes", n, size)
		case crc != want:
			return n, fmt.Errorf("get static file: crc32c %08x, want %08x", crc, want)
		}
		return n, nil
	}
}

// WriteStaticFile writes size bytes of incompressible content (so that no
// layer can shrink it) to path.
func WriteStaticFile(path string, size int64) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	writeStaticContent(w, size)
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeStaticContent writes the static file's size bytes to w, whose
// errors the caller sees (a bufio.Writer keeps the first, a hash has
// none): SHA-1 in counter mode, deterministic and random-looking to gzip.
func writeStaticContent(w io.Writer, size int64) {
	var ctr [8]byte
	for i, n := uint64(0), int64(0); n < size; i++ {
		for k := range ctr {
			ctr[k] = byte(i >> (8 * k))
		}
		sum := sha1.Sum(ctr[:])
		chunk := sum[:min(int64(len(sum)), size-n)]
		w.Write(chunk)
		n += int64(len(chunk))
	}
}

// DistinctCloneOp clones every branch and tag but leaves out two tags,
// a different pair on every operation: each request is new to the pack
// cache, so a storm of them takes the uncached path with a full clone's
// cost (a tag object is all each one saves).
func DistinctCloneOp(c *loadgen.Client, url string, refs []loadgen.Ref) loadgen.Op {
	var heads, tags []string
	for _, r := range refs {
		switch {
		case strings.HasPrefix(r.Name, "refs/heads/"):
			heads = append(heads, r.OID)
		case strings.HasPrefix(r.Name, "refs/tags/"):
			tags = append(tags, r.OID)
		}
	}
	var next atomic.Int64
	return func(ctx context.Context, _ int) (int64, error) {
		wants := distinctWants(heads, tags, next.Add(1)-1)
		res, err := c.Fetch(ctx, url, loadgen.FetchOptions{Protocol: loadgen.V2, Wants: wants})
		return res.Bytes, err
	}
}

// distinctWants is heads and tags without the i-th pair of tags. Pairs
// (a, a+d) with d in 1..⌊(n−1)/2⌋ are distinct as unordered pairs, so the
// first n·⌊(n−1)/2⌋ operations all differ.
func distinctWants(heads, tags []string, i int64) []string {
	n := int64(len(tags))
	w := slices.Clone(heads)
	if n < 3 {
		return append(w, tags...)
	}
	a := i % n
	b := (a + 1 + (i/n)%((n-1)/2)) % n
	for k, t := range tags {
		if int64(k) != a && int64(k) != b {
			w = append(w, t)
		}
	}
	slices.Sort(w)
	return slices.Compact(w)
}

// slowTransport limits every response body to rate bytes per second: a
// client on a slow link.
type slowTransport struct {
	base http.RoundTripper
	rate int64
}

// NewSlowTransport returns a keep-alive transport whose response bodies
// are read at rate bytes per second.
func NewSlowTransport(rate int64) http.RoundTripper {
	return &slowTransport{base: &http.Transport{Proxy: nil, DisableCompression: true}, rate: rate}
}

func (t *slowTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = &rateReader{r: resp.Body, rate: t.rate, now: time.Now, sleep: time.Sleep}
	return resp, nil
}

// rateReader reads at most rate bytes per second on average, in reads of
// at most a sixteenth of a second's worth, so the socket's receive buffer
// fills and the server sees a slow peer, not a bursty one.
type rateReader struct {
	r     io.ReadCloser
	rate  int64
	start time.Time
	n     int64
	now   func() time.Time
	sleep func(time.Duration)
}

func (r *rateReader) Read(p []byte) (int, error) {
	if r.start.IsZero() {
		r.start = r.now()
	}
	if chunk := max(int(r.rate/16), 1); len(p) > chunk {
		p = p[:chunk]
	}
	n, err := r.r.Read(p)
	r.n += int64(n)
	due := r.start.Add(time.Duration(float64(r.n) / float64(r.rate) * float64(time.Second)))
	if wait := due.Sub(r.now()); wait > 0 {
		r.sleep(wait)
	}
	return n, err
}

func (r *rateReader) Close() error { return r.r.Close() }

// GitUsage is what the git processes under a server did while watched.
type GitUsage struct {
	// Processes is how many distinct git processes were seen.
	Processes int
	// Lifetime is from the first git process seen to the last one gone.
	Lifetime time.Duration
	// PeakRSS is the largest sum of the git processes' resident sets in
	// one sample; MaxHWM the largest single process's peak (VmHWM).
	PeakRSS, MaxHWM int64
}

// WatchGit samples the git processes descending from root every interval
// until the returned stop function is called, which returns the usage.
// Sampling misses processes shorter than an interval, and resident sets
// are sampled, not integrated: a peak between samples is caught only by
// VmHWM.
func WatchGit(root int, interval time.Duration) (stop func() GitUsage) {
	var (
		mu    sync.Mutex
		usage GitUsage
		first time.Time
		last  time.Time
		seen  = map[int]bool{}
	)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			procs := gitDescendants("/proc", root)
			now := time.Now()
			mu.Lock()
			var rss int64
			for _, p := range procs {
				if !seen[p.pid] {
					seen[p.pid] = true
					usage.Processes++
				}
				rss += p.rss
				usage.MaxHWM = max(usage.MaxHWM, p.hwm)
			}
			if len(procs) > 0 {
				if first.IsZero() {
					first = now
				}
				last = now
			}
			usage.PeakRSS = max(usage.PeakRSS, rss)
			mu.Unlock()
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() GitUsage {
		close(done)
		<-finished
		mu.Lock()
		defer mu.Unlock()
		if !first.IsZero() {
			usage.Lifetime = last.Sub(first)
		}
		return usage
	}
}

type gitProc struct {
	pid      int
	rss, hwm int64
}

// gitDescendants lists root's descendants whose command is git.
func gitDescendants(procDir string, root int) []gitProc {
	entries, err := os.ReadDir(procDir)
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	comm := map[int]string{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(procDir, e.Name(), "stat"))
		if err != nil {
			continue
		}
		name, ppid, ok := parseStatComm(b)
		if !ok {
			continue
		}
		children[ppid] = append(children[ppid], pid)
		comm[pid] = name
	}
	var out []gitProc
	queue := slices.Clone(children[root])
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		queue = append(queue, children[pid]...)
		if c := comm[pid]; c != "git" && !strings.HasPrefix(c, "git-") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(procDir, strconv.Itoa(pid), "status"))
		if err != nil {
			continue
		}
		out = append(out, gitProc{pid: pid, rss: statusBytes(b, "VmRSS"), hwm: statusBytes(b, "VmHWM")})
	}
	return out
}

// parseStatComm returns the command name and parent of a /proc/PID/stat.
func parseStatComm(b []byte) (name string, ppid int, ok bool) {
	i := bytes.IndexByte(b, '(')
	j := bytes.LastIndexByte(b, ')')
	if i < 0 || j < i {
		return "", 0, false
	}
	f := strings.Fields(string(b[j+1:]))
	if len(f) < 2 {
		return "", 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return string(b[i+1 : j]), ppid, err == nil
}

// statusBytes reads a "Key:   N kB" line of /proc/PID/status; 0 if absent.
func statusBytes(b []byte, key string) int64 {
	for line := range strings.SplitSeq(string(b), "\n") {
		v, ok := strings.CutPrefix(line, key+":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			return 0
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		if len(f) > 1 && f[1] == "kB" {
			n *= 1024
		}
		return n
	}
	return 0
}

// MetricSum is the sum of the samples of a Prometheus text exposition
// whose name is name and whose labels include every pair in labels.
func MetricSum(text, name string, labels map[string]string) (float64, bool) {
	var sum float64
	found := false
	for line := range strings.SplitSeq(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		series, value := line[:sp], line[sp+1:]
		metric, lbls, _ := strings.Cut(series, "{")
		if metric != name {
			continue
		}
		lbls = strings.TrimSuffix(lbls, "}")
		match := true
		for k, v := range labels {
			if !hasLabel(lbls, k, v) {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		f, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		sum += f
		found = true
	}
	return sum, found
}

// hasLabel reports whether a label list (a="x",b="y") holds k="v". Values
// here are plain words, so a split on commas is enough.
func hasLabel(list, k, v string) bool {
	for kv := range strings.SplitSeq(list, ",") {
		if kv == k+`="`+v+`"` {
			return true
		}
	}
	return false
}

// Metrics fetches a server's /metrics.
func (s *Server) Metrics(ctx context.Context, c *http.Client) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+"/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("get /metrics: http %d", resp.StatusCode)
	}
	return string(b), err
}

// Pid is the process id of the server's first process (sluice itself).
func (s *Server) Pid() int { return s.procs[0].cmd.Process.Pid }

// Get makes an authenticated GET of path (REST) and discards the body.
func (s *Server) Get(ctx context.Context, c *http.Client, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+path, nil)
	if err != nil {
		return err
	}
	req.SetBasicAuth(s.user, s.pass)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("get %s: http %d", path, resp.StatusCode)
	}
	return nil
}

// Probe repeats op, pausing between runs, until ctx ends, and records the
// latency of each success.
func Probe(ctx context.Context, pause time.Duration, op func(context.Context) error) (*loadgen.Histogram, int64) {
	h := loadgen.NewHistogram()
	var errs int64
	for ctx.Err() == nil {
		t0 := time.Now()
		err := op(ctx)
		if ctx.Err() != nil {
			break // cut short by the end of the run, not a result
		}
		if err != nil {
			errs++
		} else {
			h.Record(time.Since(t0))
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
	return h, errs
}

// UtilSampler samples a server's CPU utilisation (of cores) from its
// cgroup every interval, and the throttle controller's own reading from
// /metrics, until stopped.
func UtilSampler(s *Server, c *http.Client, cores float64, interval time.Duration) (stop func() (util, metric []float64)) {
	var util, metric []float64
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		prev, err := s.CPU()
		prevT := time.Now()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			cur, err2 := s.CPU()
			now := time.Now()
			if err == nil && err2 == nil {
				util = append(util, utilisation(cur.Sub(prev).Best(), now.Sub(prevT), cores))
			}
			prev, prevT, err = cur, now, err2
			ctx, cancel := context.WithTimeout(context.Background(), interval)
			if text, err := s.Metrics(ctx, c); err == nil {
				if v, ok := MetricSum(text, "sluice_throttle_cpu_utilization_ratio", nil); ok {
					metric = append(metric, v)
				}
			}
			cancel()
		}
	}()
	return func() ([]float64, []float64) {
		close(done)
		<-finished
		return util, metric
	}
}

// utilisation is cpu spent over wall time, as a fraction of cores.
func utilisation(cpu, wall time.Duration, cores float64) float64 {
	if wall <= 0 || cores <= 0 {
		return 0
	}
	return float64(cpu) / float64(wall) / cores
}

// IsQueueRefusal reports whether an operation's error is one of the
// throttle's documented refusals: the bounded queue wait ran out, or the
// queue was full.
func IsQueueRefusal(err string) bool {
	return strings.Contains(err, "for capacity") || strings.Contains(err, "queue full")
}
