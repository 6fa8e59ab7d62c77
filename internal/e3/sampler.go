package e3

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// metricValues are the node meters read from /metrics, summed over label
// sets except where a label is named.
type metricValues struct {
	gitProcs, inUse, queued, limit float64
	hit, miss                      float64 // cacheable pack lookups
	processCPU                     float64 // the sluice process only
	ok                             bool
}

// scrape reads the meters the report charts from a node's /metrics.
func scrape(ctx context.Context, hc *http.Client, url string) metricValues {
	var m metricValues
	ctx, cancel := context.WithTimeout(ctx, 900*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return m
	}
	resp, err := hc.Do(req)
	if err != nil {
		return m
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return m
	}
	m.ok = true
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, value, ok := parseSample(line)
		if !ok {
			continue
		}
		switch name {
		case "sluice_git_processes_running":
			m.gitProcs += value
		case "sluice_throttle_tickets_in_use":
			m.inUse += value
		case "sluice_throttle_tickets_queued":
			m.queued += value
		case "sluice_throttle_tickets_limit":
			m.limit += value
		case "process_cpu_seconds_total":
			m.processCPU = value
		case "sluice_packcache_lookups_total":
			if !strings.Contains(labels, `kind="packs"`) {
				continue
			}
			switch {
			case strings.Contains(labels, `result="hit"`), strings.Contains(labels, `result="coalesced"`):
				m.hit += value
			case strings.Contains(labels, `result="miss"`):
				m.miss += value
			}
		}
	}
	return m
}

// parseSample splits a Prometheus text-format sample line.
func parseSample(line string) (name, labels string, value float64, ok bool) {
	rest := line
	if i := strings.IndexByte(line, '{'); i >= 0 {
		j := strings.LastIndexByte(line, '}')
		if j < i {
			return "", "", 0, false
		}
		name, labels, rest = line[:i], line[i+1:j], strings.TrimSpace(line[j+1:])
	} else {
		var found bool
		name, rest, found = strings.Cut(line, " ")
		if !found {
			return "", "", 0, false
		}
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return "", "", 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	return name, labels, v, err == nil
}

// clientCPU is the CPU this process and its reaped children (real git
// clients) have used: the load client's share of the machine. Local nodes
// are children too but are reaped only when stopped, after the run.
func clientCPU() time.Duration {
	var self, children syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	tv := func(t syscall.Timeval) time.Duration {
		return time.Duration(t.Sec)*time.Second + time.Duration(t.Usec)*time.Microsecond
	}
	return tv(self.Utime) + tv(self.Stime) + tv(children.Utime) + tv(children.Stime)
}
