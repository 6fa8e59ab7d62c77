package pgserver

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Halt and Resume stop and start a server in place, keeping its data
// directory and port, so that tests can take PostgreSQL away under load
// and bring it back (the cluster harness's database outage). Halt uses
// pg_ctl's fast mode: sessions are cut as when an operator restarts the
// server.

// Halt stops the server but keeps its data for Resume.
func (s *Server) Halt() error {
	if out, err := s.run("pg_ctl", "-D", s.dataDir, "-m", "fast", "-w", "stop"); err != nil {
		return fmt.Errorf("pg_ctl stop: %w\n%s", err, out)
	}
	return nil
}

// quotedArg matches one argument of postmaster.opts, which PostgreSQL
// writes as the binary followed by each argument in double quotes.
var quotedArg = regexp.MustCompile(`"([^"]*)"`)

// Resume starts a halted server again with the options it first started
// with (read back from postmaster.opts), on the same port.
func (s *Server) Resume() error {
	b, err := os.ReadFile(filepath.Join(s.dataDir, "postmaster.opts"))
	if err != nil {
		return fmt.Errorf("read postmaster.opts: %w", err)
	}
	var opts []string
	args := quotedArg.FindAllStringSubmatch(string(b), -1)
	for i := 0; i < len(args); i++ {
		a := args[i][1]
		if a == "-D" { // pg_ctl passes the data directory itself
			i++
			continue
		}
		if strings.ContainsAny(a, " '\\") {
			return fmt.Errorf("postmaster.opts: cannot pass option %q through pg_ctl -o", a)
		}
		opts = append(opts, a)
	}
	out, err := s.run("pg_ctl", "-D", s.dataDir, "-l", filepath.Join(s.dir, "postgres.log"),
		"-w", "-t", "60", "-o", strings.Join(opts, " "), "start")
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
		return fmt.Errorf("pg_ctl start: %w\n%s\n%s", err, out, tail(log, 2000))
	}
	return nil
}
