// Package e3 is Sluice's performance lab: `sluice e3 run EXPERIMENT.json`
// provisions the instances an experiment describes, drives them with a
// weighted workload of simulated users through stages of growing client
// counts, samples every node each second, and writes results.json and one
// self-contained report.html.
//
// The design answers the weaknesses of Bitbucket's E3 (REFERENCES.md):
//
//   - One command, one machine or many. A thread's instance is either
//     provisioned locally — a throw-away PostgreSQL (internal/pgserver) or
//     SQLite, N `sluice serve` processes of the binary under test sharing a
//     repository directory, HAProxy in front when N > 1, and a datagen data
//     set — or an existing deployment given by URL and credentials, so the
//     same experiment file measures a real cluster.
//   - Cheap clients. Git scripts use internal/loadgen, which negotiates,
//     streams and checksums packs without storing or unpacking them, so
//     the client costs a fraction of what it makes the server spend and
//     can share the machine (its own CPU is measured and reported). A
//     "git" client mode runs the real git for realism checks.
//   - No restarts or sleeps between stages: a stage only changes how many
//     clients run; operations are attributed to the stage in which they
//     finish.
//   - One offline report with its charts drawn here as inline SVG.
//
// Clients are closed-loop: each runs its script back to back (plus an
// optional think time), so throughput at a client count is what the
// instance sustains, and the saturating fit T(c) = Max·c/(Half+c) names
// the throughput it tends to. Clients spread over many load users (datagen
// creates them with tokens) so the per-user rate limit sees realistic
// users; against an existing deployment every client uses the one
// account given, whose rate limit must then be lifted.
//
// Node meters: CPU and memory from the cgroup each local node runs in
// (internal/bench's cpuacct/cpu/memory cgroups, which charge every git
// process the node forks; a CPU cap uses v1 cpu.cfs_quota_us or v2
// cpu.max), and from each node's /metrics: sluice_git_processes_running,
// sluice_throttle_tickets_{in_use,queued,limit} and
// sluice_packcache_lookups_total{kind="packs"} for the cache hit rate. For
// an existing deployment CPU comes from process_cpu_seconds_total, which
// covers the sluice process but not its git children.
package e3
