package e3

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-scm/sluice/internal/bench"
)

// The machine's other tenants. Nodes, load client, PostgreSQL and HAProxy
// share one machine in a local experiment, and on a shared test machine so
// may other people's work: the machine's busy time from /proc/stat, less
// everything the lab accounts for, says how much of the machine the
// measurement did not have.

// userHZ is the unit of /proc/stat (USER_HZ, 100 on every Linux
// architecture Go supports).
const userHZ = 100

// machineBusy is the CPU time all CPUs have spent not idle (idle and
// iowait are idle) since boot.
func machineBusy() time.Duration {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0
	}
	return parseCPULine(sc.Text())
}

// parseCPULine reads the aggregate "cpu  user nice system idle iowait irq
// softirq steal guest guest_nice" line; guest time is already in user.
func parseCPULine(line string) time.Duration {
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0
	}
	var busy int64
	for i, v := range f[1:] {
		if i >= 8 { // guest, guest_nice: counted in user and nice
			break
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0
		}
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		busy += n
	}
	return time.Duration(busy) * time.Second / userHZ
}

// infraCPU is each helper process tree's CPU so far; a process that has
// exited reads 0 and is skipped by the caller's difference.
func infraCPU(procs []infraProc) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, p := range procs {
		if t, err := bench.TreeCPU(p.pid); err == nil {
			out[p.name] += t
		}
	}
	return out
}
