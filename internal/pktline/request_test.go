package pktline

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-scm/sluice/internal/problem"
)

const (
	oidA = "1111111111111111111111111111111111111111"
	oidB = "2222222222222222222222222222222222222222"
	oidC = "3333333333333333333333333333333333333333"
)

// pkts frames each string as a pkt-line; "0000", "0001" and "0002" pass
// through as specials.
func pkts(lines ...string) []byte {
	var b bytes.Buffer
	for _, l := range lines {
		switch l {
		case "0000", "0001", "0002":
			b.WriteString(l)
		default:
			fmt.Fprintf(&b, "%04x%s", len(l)+4, l)
		}
	}
	return b.Bytes()
}

func TestParseUploadRequestV0(t *testing.T) {
	in := pkts("want "+oidA+" multi_ack_detailed side-band-64k thin-pack ofs-delta agent=git/2.39.5\n",
		"want "+oidB+"\n", "shallow "+oidC+"\n", "deepen 3\n", "filter blob:none\n", "0000",
		"have "+oidC+"\n", "0000", "have "+oidB+"\n", "done\n")
	req, err := ParseUploadRequest(bytes.NewReader(append(in, "trailing pack data"...)), 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(req.Raw, in) {
		t.Errorf("Raw = %q, want exactly the request", req.Raw)
	}
	if fmt.Sprint(req.Wants) != fmt.Sprint([]string{oidA, oidB}) || fmt.Sprint(req.Haves) != fmt.Sprint([]string{oidC, oidB}) ||
		req.Deepen != 3 || req.Filter != "blob:none" || !req.Done || req.Agent != "git/2.39.5" || len(req.Shallows) != 1 ||
		len(req.Capabilities) != 5 || req.Command != "fetch" {
		t.Errorf("parsed %+v", req)
	}

	// Only a flush: the client wants nothing.
	req, err = ParseUploadRequest(bytes.NewReader([]byte("0000")), 0, 100)
	if err != nil || len(req.Wants) != 0 {
		t.Fatalf("flush-only request: %+v, %v", req, err)
	}
	// A stateless negotiation round ends without done.
	req, err = ParseUploadRequest(bytes.NewReader(pkts("want "+oidA+"\n", "0000", "have "+oidB+"\n", "0000")), 1, 1000)
	if err != nil || req.Done || len(req.Haves) != 1 || req.Version != 1 {
		t.Fatalf("negotiation round: %+v, %v", req, err)
	}
}

func TestParseUploadRequestV2(t *testing.T) {
	fetch := pkts("command=fetch", "agent=git/2.39.5", "object-format=sha1", "server-option=a b", "0001",
		"thin-pack", "no-progress", "ofs-delta", "include-tag\n", "want "+oidA+"\n", "want "+oidA+"\n",
		"want-ref refs/heads/main\n", "have "+oidB+"\n", "shallow "+oidC+"\n", "deepen-since 1700000000\n",
		"deepen-not refs/tags/v1\n", "deepen-relative\n", "filter tree:0\n", "sideband-all\n", "done\n", "0000")
	lsRefs := pkts("command=ls-refs\n", "agent=git/2.39.5\n", "0001", "peel\n", "symrefs\n", "unborn\n",
		"ref-prefix HEAD\n", "ref-prefix refs/heads/\n", "0000")
	stream := bytes.NewReader(bytes.Join([][]byte{lsRefs, fetch, []byte("0000")}, nil))

	req, err := ParseUploadRequest(stream, 2, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if req.Command != "ls-refs" || !req.Peel || !req.Symrefs || !req.Unborn || len(req.RefPrefixes) != 2 || !bytes.Equal(req.Raw, lsRefs) {
		t.Errorf("ls-refs parsed %+v", req)
	}
	req, err = ParseUploadRequest(stream, 2, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if req.Command != "fetch" || !req.ThinPack || !req.NoProgress || !req.OfsDelta || !req.IncludeTag || !req.Done ||
		!req.SidebandAll || !req.DeepenRelative || req.DeepenSince != 1700000000 || req.Filter != "tree:0" ||
		len(req.Wants) != 2 || len(req.WantRefs) != 1 || len(req.DeepenNot) != 1 || req.ObjectFormat != "sha1" ||
		fmt.Sprint(req.ServerOptions) != "[a b]" || !bytes.Equal(req.Raw, fetch) {
		t.Errorf("fetch parsed %+v", req)
	}
	// The closing flush ends the session.
	if _, err := ParseUploadRequest(stream, 2, 1<<20); err != io.EOF {
		t.Errorf("after the last command: %v, want io.EOF", err)
	}
	if _, err := ParseUploadRequest(stream, 2, 1<<20); err != io.EOF {
		t.Errorf("at end of input: %v, want io.EOF", err)
	}
	// A command without arguments.
	if req, err := ParseUploadRequest(bytes.NewReader(pkts("command=ls-refs\n", "0000")), 2, 100); err != nil || req.Command != "ls-refs" {
		t.Errorf("ls-refs without arguments: %+v, %v", req, err)
	}
}

func TestParseUploadRequestErrors(t *testing.T) {
	tests := []struct {
		name    string
		version int
		in      []byte
		max     int64
		want    error
	}{
		{"v0 bad oid", 0, pkts("want 123\n", "0000"), 1000, ErrMalformed},
		{"v0 upper-case oid", 0, pkts("want "+strings.ToUpper(strings.Repeat("ab", 20))+"\n", "0000"), 1000, ErrMalformed},
		{"v0 unknown line", 0, pkts("want "+oidA+"\n", "wish "+oidB+"\n", "0000"), 1000, ErrMalformed},
		{"v0 delim", 0, pkts("want "+oidA+"\n", "0001"), 1000, ErrMalformed},
		{"v0 bad have", 0, pkts("want "+oidA+"\n", "0000", "have x\n"), 1000, ErrMalformed},
		{"v0 deepen zero", 0, pkts("want "+oidA+"\n", "deepen 0\n", "0000"), 1000, ErrMalformed},
		{"v0 deepen huge", 0, pkts("want "+oidA+"\n", "deepen 99999999999999999999\n", "0000"), 1000, ErrMalformed},
		{"v0 two filters", 0, pkts("want "+oidA+"\n", "filter a\n", "filter b\n", "0000"), 1000, ErrMalformed},
		{"v0 truncated", 0, pkts("want " + oidA + "\n"), 1000, io.ErrUnexpectedEOF},
		{"v0 malformed length", 0, []byte("00zz"), 1000, ErrMalformed},
		{"v0 over bytes", 0, pkts("want "+oidA+"\n", "0000"), 20, ErrTooLarge},
		{"v2 no command", 2, pkts("agent=x\n", "0000"), 1000, ErrMalformed},
		{"v2 unsupported command", 2, pkts("command=object-info\n", "0000"), 1000, ErrUnsupported},
		{"v2 bad fetch argument", 2, pkts("command=fetch\n", "0001", "want-everything\n", "0000"), 1000, ErrMalformed},
		{"v2 ls-refs argument in fetch", 2, pkts("command=fetch\n", "0001", "peel\n", "0000"), 1000, ErrMalformed},
		{"v2 control character", 2, pkts("command=ls-refs\n", "0001", "ref-prefix a\x01b\n", "0000"), 1000, ErrMalformed},
		{"v2 second delim", 2, pkts("command=fetch\n", "0001", "0001", "0000"), 1000, ErrMalformed},
		{"v2 response-end", 2, pkts("command=fetch\n", "0002"), 1000, ErrMalformed},
		{"v2 truncated", 2, pkts("command=fetch\n", "0001", "done\n"), 1000, io.ErrUnexpectedEOF},
		{"unknown version", 3, pkts("0000"), 1000, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseUploadRequest(bytes.NewReader(tt.in), tt.version, tt.max)
			if err == nil {
				t.Fatal("no error")
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
		})
	}
	// Too many lines, each small enough for the byte budget.
	var b bytes.Buffer
	b.Write(pkts("want " + oidA + "\n"))
	for range MaxRequestLines {
		b.Write(pkts("shallow " + oidB + "\n"))
	}
	_, err := ParseUploadRequest(&b, 0, 1<<30)
	if !errors.Is(err, ErrTooLarge) || problem.KindOf(err) != problem.TooLarge {
		t.Fatalf("too many lines: %v", err)
	}
}

func TestKey(t *testing.T) {
	parse := func(version int, lines ...string) *UploadRequest {
		t.Helper()
		req, err := ParseUploadRequest(bytes.NewReader(pkts(lines...)), version, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		return req
	}
	base := parse(2, "command=fetch", "agent=git/2.39.5", "object-format=sha1", "0001", "thin-pack", "ofs-delta",
		"want "+oidA, "want "+oidB, "have "+oidC, "have "+oidA, "done", "0000")
	same := []*UploadRequest{
		// Another client version, LF-terminated lines, other order, duplicates.
		parse(2, "command=fetch\n", "agent=git/2.45.0\n", "object-format=sha1\n", "session-id=abc\n", "0001",
			"ofs-delta\n", "want "+oidB+"\n", "want "+oidA+"\n", "want "+oidA+"\n", "thin-pack\n", "have "+oidA+"\n", "have "+oidC+"\n", "done\n", "0000"),
	}
	different := map[string]*UploadRequest{
		"no done":      parse(2, "command=fetch", "object-format=sha1", "0001", "thin-pack", "ofs-delta", "want "+oidA, "want "+oidB, "have "+oidC, "have "+oidA, "0000"),
		"other want":   parse(2, "command=fetch", "object-format=sha1", "0001", "thin-pack", "ofs-delta", "want "+oidA, "have "+oidC, "have "+oidA, "done", "0000"),
		"no thin-pack": parse(2, "command=fetch", "object-format=sha1", "0001", "ofs-delta", "want "+oidA, "want "+oidB, "have "+oidC, "have "+oidA, "done", "0000"),
		"filter":       parse(2, "command=fetch", "object-format=sha1", "0001", "thin-pack", "ofs-delta", "want "+oidA, "want "+oidB, "have "+oidC, "have "+oidA, "filter blob:none", "done", "0000"),
		"no format":    parse(2, "command=fetch", "0001", "thin-pack", "ofs-delta", "want "+oidA, "want "+oidB, "have "+oidC, "have "+oidA, "done", "0000"),
		"v0":           parse(0, "want "+oidA+" thin-pack ofs-delta object-format=sha1", "want "+oidB, "0000", "have "+oidC, "have "+oidA, "done"),
	}
	for i, r := range same {
		if r.Key() != base.Key() {
			t.Errorf("same[%d] has a different key:\n%s---\n%s", i, r.Canonical(), base.Canonical())
		}
	}
	for name, r := range different {
		if r.Key() == base.Key() {
			t.Errorf("%s shares the key:\n%s", name, r.Canonical())
		}
	}
	// v0 keeps the order of haves (ACK lines follow it); agent still drops.
	v0a := parse(0, "want "+oidA+" multi_ack_detailed agent=git/2.39.5", "0000", "have "+oidB, "have "+oidC, "done")
	v0b := parse(0, "want "+oidA+" agent=git/2.30.0 multi_ack_detailed", "0000", "have "+oidC, "have "+oidB, "done")
	v0c := parse(0, "want "+oidA+" multi_ack_detailed agent=git/2.46.0", "0000", "have "+oidB, "have "+oidC, "done")
	v0d := parse(0, "want "+oidA+" multi_ack_detailed agent=git/2.39.5", "0000", "have "+oidB, "0000", "have "+oidC, "done")
	if v0a.Key() == v0b.Key() {
		t.Error("v0 requests with haves in another order share a key")
	}
	if v0a.Key() != v0c.Key() {
		t.Errorf("v0 requests differing only in agent differ:\n%s---\n%s", v0a.Canonical(), v0c.Canonical())
	}
	// A stateless git stops at the first flush without "done": a flush
	// among the haves changes the answer, so it must change the key, or
	// one request could poison the other's cache entry.
	if v0a.Key() == v0d.Key() {
		t.Errorf("v0 requests with a flush in different places share a key:\n%s", v0d.Canonical())
	}
	ls1 := parse(2, "command=ls-refs", "agent=a", "0001", "symrefs", "ref-prefix refs/tags/", "ref-prefix HEAD", "0000")
	ls2 := parse(2, "command=ls-refs", "agent=b", "0001", "ref-prefix HEAD", "ref-prefix refs/tags/", "symrefs", "0000")
	ls3 := parse(2, "command=ls-refs", "agent=b", "0001", "ref-prefix HEAD", "ref-prefix refs/tags/", "symrefs", "peel", "0000")
	if ls1.Key() != ls2.Key() || ls1.Key() == ls3.Key() {
		t.Error("ls-refs keys do not follow ref-prefix sets and peel")
	}
}

// captureRequests clones (or fetches into dst if it exists) from src with
// the real git client, recording what it sends to upload-pack.
func captureRequests(t *testing.T, src, dst string, version int, args ...string) []byte {
	t.Helper()
	rec := filepath.Join(t.TempDir(), "request")
	uploadPack := fmt.Sprintf("tee '%s' | git -c uploadpack.allowFilter=true upload-pack", rec)
	var cmdArgs []string
	if _, err := os.Stat(dst); err == nil {
		cmdArgs = append([]string{"-C", dst, "-c", fmt.Sprintf("protocol.version=%d", version), "fetch", "-q", "--upload-pack=" + uploadPack, "file://" + src}, args...)
	} else {
		cmdArgs = append([]string{"-c", fmt.Sprintf("protocol.version=%d", version), "clone", "-q", "--no-local", "--upload-pack=" + uploadPack}, args...)
		cmdArgs = append(cmdArgs, "file://"+src, dst)
	}
	git(t, cmdArgs...)
	data, err := os.ReadFile(rec)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func git(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	home := t.TempDir()
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "XDG_CONFIG_HOME=" + home, "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@example.com", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@example.com"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// parseAll parses every request in a captured stream.
func parseAll(t *testing.T, data []byte, version int) []*UploadRequest {
	t.Helper()
	r := bytes.NewReader(data)
	var reqs []*UploadRequest
	var raw []byte
	for {
		req, err := ParseUploadRequest(r, version, 1<<20)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("request %d of %q: %v", len(reqs), data, err)
		}
		raw = append(raw, req.Raw...)
		reqs = append(reqs, req)
		if version < 2 {
			break // one v0 request per stream (until done)
		}
	}
	// git ends the session with a flush, or just closes after the fetch.
	if version == 2 && !bytes.Equal(raw, data) && !bytes.Equal(append(raw, "0000"...), data) {
		t.Errorf("Raw of all requests is not the captured stream:\n%q\n%q", raw, data)
	}
	return reqs
}

func TestParseRealRequests(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	git(t, "init", "-q", "-b", "main", src)
	os.WriteFile(filepath.Join(src, "f"), []byte("one\n"), 0o644)
	git(t, "-C", src, "add", "f")
	git(t, "-C", src, "commit", "-q", "-m", "one")
	git(t, "-C", src, "tag", "-a", "-m", "v1", "v1")
	os.WriteFile(filepath.Join(src, "f"), []byte("two\n"), 0o644)
	git(t, "-C", src, "commit", "-q", "-a", "-m", "two")
	head := git(t, "-C", src, "rev-parse", "HEAD")

	t.Run("v2 clone", func(t *testing.T) {
		reqs := parseAll(t, captureRequests(t, src, filepath.Join(dir, "c2"), 2), 2)
		if len(reqs) != 2 || reqs[0].Command != "ls-refs" || reqs[1].Command != "fetch" {
			t.Fatalf("got %d requests", len(reqs))
		}
		ls, f := reqs[0], reqs[1]
		if !ls.Symrefs || !ls.Peel || !strings.Contains(strings.Join(ls.RefPrefixes, " "), "refs/heads/") || !strings.HasPrefix(ls.Agent, "git/") {
			t.Errorf("ls-refs: %+v", ls)
		}
		if !f.Done || !f.OfsDelta || !f.ThinPack || len(f.Haves) != 0 || !strings.Contains(strings.Join(f.Wants, " "), head) || f.ObjectFormat != "sha1" {
			t.Errorf("fetch: %+v", f)
		}
	})
	t.Run("v0 clone", func(t *testing.T) {
		reqs := parseAll(t, captureRequests(t, src, filepath.Join(dir, "c0"), 0), 0)
		r := reqs[0]
		caps := strings.Join(r.Capabilities, " ")
		if !r.Done || !strings.Contains(strings.Join(r.Wants, " "), head) || !strings.Contains(caps, "side-band-64k") || !strings.HasPrefix(r.Agent, "git/") {
			t.Errorf("v0 clone: %+v", r)
		}
	})
	t.Run("v2 shallow and partial", func(t *testing.T) {
		reqs := parseAll(t, captureRequests(t, src, filepath.Join(dir, "cs"), 2, "--depth=1", "--filter=blob:none"), 2)
		f := reqs[len(reqs)-1]
		if f.Deepen != 1 || f.Filter != "blob:none" {
			t.Errorf("shallow partial fetch: %+v", f)
		}
	})
	t.Run("fetch with haves", func(t *testing.T) {
		for _, version := range []int{0, 2} {
			clone := filepath.Join(dir, fmt.Sprintf("inc%d", version))
			git(t, "clone", "-q", "--no-local", "file://"+src, clone)
			os.WriteFile(filepath.Join(src, "f"), []byte(clone+"\n"), 0o644)
			git(t, "-C", src, "commit", "-q", "-a", "-m", clone)
			reqs := parseAll(t, captureRequests(t, src, clone, version), version)
			var haves int
			for _, r := range reqs {
				haves += len(r.Haves)
			}
			if haves == 0 {
				t.Errorf("v%d incremental fetch sent no haves: %d requests", version, len(reqs))
			}
		}
	})
}

func FuzzParseUploadRequest(f *testing.F) {
	seeds := [][]byte{
		pkts("want "+oidA+" multi_ack_detailed side-band-64k agent=git/2.39.5\n", "deepen 1\n", "0000", "have "+oidB+"\n", "done\n"),
		pkts("0000"),
		pkts("command=fetch", "agent=git/2.39.5", "0001", "thin-pack", "want "+oidA, "filter blob:none", "done", "0000"),
		pkts("command=ls-refs", "0001", "peel", "symrefs", "ref-prefix refs/heads/", "0000", "0000"),
		[]byte("0003"), []byte("ffff"), []byte("000"),
	}
	for _, s := range seeds {
		f.Add(s, uint8(0))
		f.Add(s, uint8(2))
	}
	f.Fuzz(func(t *testing.T, data []byte, v uint8) {
		version := int(v % 3)
		req, err := ParseUploadRequest(bytes.NewReader(data), version, 1<<16)
		if err != nil {
			return
		}
		if !bytes.HasPrefix(data, req.Raw) {
			t.Fatalf("Raw %q is not a prefix of the input", req.Raw)
		}
		// Parsing Raw again gives the same request.
		again, err := ParseUploadRequest(bytes.NewReader(req.Raw), version, 1<<16)
		if err != nil {
			t.Fatalf("Raw does not parse again: %v", err)
		}
		if again.Canonical() != req.Canonical() {
			t.Fatalf("canonical form changed:\n%s---\n%s", req.Canonical(), again.Canonical())
		}
	})
}
