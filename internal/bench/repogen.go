package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
)

// RepoSpec describes a generated repository.
type RepoSpec struct {
	// Commits on main; every 50th is tagged (annotated) and every 200th
	// starts a short topic branch.
	Commits int
	// Files is the number of files at the start.
	Files int
	// Seed makes the history reproducible: the same spec gives the same
	// object ids on every machine.
	Seed uint64
}

// DefaultRepoSpec is the benchmark repository: about 13 MB packed, some
// 35,000 objects, the size of a "typical" repository in Bitbucket's E3
// data sets, with enough commits that counting objects is real work.
var DefaultRepoSpec = RepoSpec{Commits: 5500, Files: 500, Seed: 1}

// words is the vocabulary of generated text: source-like identifiers, so
// that blobs compress and delta about as well as code does.
var words = strings.Fields(`func return if else for range var const type struct interface map chan
go defer select case switch break continue nil true false err ctx req resp buf len cap append copy
make new string int int64 uint32 byte rune error bool float64 config server client handler request
response repository commit tree blob object pack index ref branch tag merge rebase fetch push clone
user project permission token session cache queue ticket limit timeout retry backoff metric log
debug info warn fatal panic recover mutex lock unlock wait group channel worker pool task job`)

// GenerateRepo creates a bare repository at dir from spec with git
// fast-import, then repacks it the way a well-kept server keeps its
// repositories: one pack with a reachability bitmap.
func GenerateRepo(ctx context.Context, git, dir string, spec RepoSpec) error {
	if out, err := exec.CommandContext(ctx, git, "init", "--bare", "-q", "-b", "main", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("git init: %v: %s", err, out)
	}
	cmd := exec.CommandContext(ctx, git, "fast-import", "--quiet")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start fast-import: %w", err)
	}
	w := bufio.NewWriterSize(stdin, 1<<20)
	genErr := writeHistory(w, spec)
	if genErr == nil {
		genErr = w.Flush()
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("fast-import: %v: %s", err, stderr.String())
	}
	if genErr != nil {
		return fmt.Errorf("generate history: %w", genErr)
	}
	// -f recomputes deltas across the whole history (fast-import only
	// deltas against the previous version of the same path).
	repack := exec.CommandContext(ctx, git, "-c", "pack.threads=2", "repack", "-adfq", "--write-bitmap-index")
	repack.Dir = dir
	if out, err := repack.CombinedOutput(); err != nil {
		return fmt.Errorf("repack: %v: %s", err, out)
	}
	return nil
}

// file is one generated file: a list of lines.
type file struct {
	name  string
	lines []string
}

// writeHistory writes the fast-import stream for spec.
func writeHistory(w io.Writer, spec RepoSpec) error {
	rng := rand.New(rand.NewPCG(spec.Seed, spec.Seed^0x5eed))
	line := func() string {
		n := 3 + rng.IntN(8)
		parts := make([]string, n)
		for i := range parts {
			parts[i] = words[rng.IntN(len(words))]
			if rng.IntN(2) == 0 {
				parts[i] += fmt.Sprint(rng.IntN(100000))
			}
		}
		return strings.Repeat("\t", rng.IntN(3)) + strings.Join(parts, " ")
	}
	var files []*file
	for i := range spec.Files {
		f := &file{name: fmt.Sprintf("pkg%02d/file%04d.go", i%20, i)}
		for range 40 + rng.IntN(160) {
			f.lines = append(f.lines, line())
		}
		files = append(files, f)
	}
	blob := func(f *file) string {
		return strings.Join(f.lines, "\n") + "\n"
	}
	const epoch = 1600000000
	bw := bufio.NewWriter(w)
	for c := 1; c <= spec.Commits; c++ {
		// Edit one to three files: replace a few lines, insert a few.
		var changed []*file
		for range 1 + rng.IntN(3) {
			f := files[rng.IntN(len(files))]
			at := rng.IntN(len(f.lines))
			for i := at; i < min(at+1+rng.IntN(4), len(f.lines)); i++ {
				f.lines[i] = line()
			}
			ins := make([]string, rng.IntN(40))
			for i := range ins {
				ins[i] = line()
			}
			f.lines = slices.Insert(f.lines, rng.IntN(len(f.lines)+1), ins...)
			changed = append(changed, f)
		}
		if rng.IntN(5) == 0 {
			f := &file{name: fmt.Sprintf("pkg%02d/new%05d.go", rng.IntN(20), c)}
			for range 20 + rng.IntN(80) {
				f.lines = append(f.lines, line())
			}
			files = append(files, f)
			changed = append(changed, f)
		}
		msg := fmt.Sprintf("change %d: %s\n", c, line())
		fmt.Fprintf(bw, "commit refs/heads/main\nmark :%d\n", c)
		fmt.Fprintf(bw, "author Dev %d <dev%d@example.com> %d +0000\n", c%17, c%17, epoch+c*600)
		fmt.Fprintf(bw, "committer Dev %d <dev%d@example.com> %d +0000\n", c%17, c%17, epoch+c*600)
		fmt.Fprintf(bw, "data %d\n%s", len(msg), msg)
		if c == 1 {
			// The first commit holds every initial file.
			changed = files
		} else {
			fmt.Fprintf(bw, "from :%d\n", c-1)
		}
		for _, f := range changed {
			b := blob(f)
			fmt.Fprintf(bw, "M 100644 inline %s\ndata %d\n%s\n", f.name, len(b), b)
		}
		if c%50 == 0 {
			tmsg := fmt.Sprintf("release %d\n", c/50)
			fmt.Fprintf(bw, "tag v%d.0\nfrom :%d\ntagger Release <release@example.com> %d +0000\ndata %d\n%s\n",
				c/50, c, epoch+c*600, len(tmsg), tmsg)
		}
		if c%200 == 0 {
			// A topic branch of two commits off this one, left unmerged.
			for k := 1; k <= 2; k++ {
				f := files[rng.IntN(len(files))]
				f2 := &file{name: f.name, lines: slices.Clone(f.lines)}
				f2.lines = append(f2.lines, line(), line())
				tmsg := fmt.Sprintf("topic %d work %d\n", c, k)
				fmt.Fprintf(bw, "commit refs/heads/topic/%d\n", c)
				fmt.Fprintf(bw, "committer Dev 1 <dev1@example.com> %d +0000\ndata %d\n%s", epoch+c*600+k, len(tmsg), tmsg)
				if k == 1 {
					fmt.Fprintf(bw, "from :%d\n", c)
				}
				b := blob(f2)
				fmt.Fprintf(bw, "M 100644 inline %s\ndata %d\n%s\n", f2.name, len(b), b)
			}
		}
	}
	return bw.Flush()
}
