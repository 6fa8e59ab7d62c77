package repo

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/problem"
)

// PushLimits bound what one push may add to a repository. Git 2.39 has no
// setting for either: fsck has no blob size limit and core.maxTreeDepth
// came later, so pre-receive checks them against the quarantined objects.
type PushLimits struct {
	// MaxBlobSize is the largest blob a push may add (git.max_blob_size);
	// 0 means no limit. A 4 MiB pack can hold a 4 GiB blob of zeros.
	MaxBlobSize int64
	// MaxTreeDepth is the deepest nesting of directories a push may add
	// (git.max_tree_depth), the root directory being depth 1; 0 means no
	// limit.
	MaxTreeDepth int
}

// CheckPushedObjects refuses a push whose new objects break limits. It runs
// in pre-receive: repoDir is the repository, quarantineEnv the
// GIT_QUARANTINE_PATH, GIT_OBJECT_DIRECTORY and
// GIT_ALTERNATE_OBJECT_DIRECTORIES git gave the hook (so the pushed objects
// are visible before they are accepted), newTips the new ids of the refs
// being updated (zero ids, deletions, are skipped).
//
// Only objects the push adds are looked at: those reachable from newTips but
// from no ref of the repository ("--not --all", which, as in receive-pack's
// own connectivity check, excludes what the trees of the existing commits
// the walk meets hold: a new root commit that reuses an old big file is
// refused for it too). Blob sizes come from
// rev-list's own size filter, so no blob is read. Tree depth is the height
// of the new trees: each new tree is read once (a tree bomb of a few
// distinct trees costs a few reads however many paths it spans), and a
// tree the repository already has counts as one level. That is the
// accepted gap: a chain built over several pushes, each under the limit,
// is not seen here; reads stay safe from it because the interactive git
// commands are bounded (see gitcmd) and archives check depth first.
//
// A blob over the limit is TooLarge, a tree too deep Forbidden; both
// messages name the setting.
func (m *Manager) CheckPushedObjects(ctx context.Context, repoDir string, quarantineEnv []string, newTips []string, limits PushLimits) error {
	var tips []string
	for _, t := range newTips {
		if !validOID(t) {
			return problem.New(problem.Invalid, "invalid object id %q", t)
		}
		if strings.Trim(t, "0") != "" {
			tips = append(tips, t)
		}
	}
	if len(tips) == 0 || (limits.MaxBlobSize <= 0 && limits.MaxTreeDepth <= 0) {
		return nil
	}
	if limits.MaxBlobSize > 0 {
		if err := m.checkBlobSizes(ctx, repoDir, quarantineEnv, tips, limits.MaxBlobSize); err != nil {
			return err
		}
	}
	if limits.MaxTreeDepth > 0 {
		if err := m.checkTreeDepth(ctx, repoDir, quarantineEnv, tips, limits.MaxTreeDepth); err != nil {
			return err
		}
	}
	return nil
}

// newObjectsFlags make rev-list list the objects reachable from its
// arguments but from no ref; the trailing --not flips the sense back for
// the tips, which gitcmd puts after --end-of-options.
var newObjectsFlags = []string{"--objects", "--no-object-names", "--not", "--all", "--not"}

// checkBlobSizes pipes the new objects from rev-list straight into
// cat-file --batch-check, which prints their sizes from the pack index and
// object headers without reading any blob. (rev-list's own
// --filter=blob:limit with --filter-print-omitted cannot be used: it also
// prints big blobs the repository already had.) The two processes are
// connected by an OS pipe, so a push of millions of objects is never held
// in memory here.
func (m *Manager) checkBlobSizes(ctx context.Context, dir string, env, tips []string, limit int64) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("check pushed blob sizes: %w", err)
	}
	list, err := m.git.Start(ctx, gitcmd.Cmd{Dir: dir, Name: "rev-list", Flags: newObjectsFlags, Args: tips, Env: env, Unbounded: true, Stdout: pw})
	pw.Close()
	if err != nil {
		pr.Close()
		return fmt.Errorf("check pushed blob sizes: %w", err)
	}
	var big string
	var size int64
	err = m.streamAll(ctx, gitcmd.Cmd{Dir: dir, Name: "cat-file", Flags: []string{"--batch-check=%(objecttype) %(objectsize) %(objectname)"}, Stdin: pr, Env: env, Unbounded: true},
		func(r *bufio.Reader) error {
			for {
				line, err := r.ReadString('\n')
				if f := strings.Fields(line); len(f) == 3 && f[0] == "blob" {
					if n, perr := strconv.ParseInt(f[1], 10, 64); perr == nil && n > limit {
						big, size = f[2], n
						return errEnough
					}
				}
				if err == io.EOF {
					return nil
				}
				if err != nil {
					return err
				}
			}
		})
	pr.Close()
	if big != "" {
		cancel()
	}
	listErr := list.Wait()
	if big != "" {
		return problem.New(problem.TooLarge, "push refused: file %s (%d bytes) is larger than git.max_blob_size (%d bytes)", big, size, limit)
	}
	if err := errors.Join(err, listErr); err != nil {
		return fmt.Errorf("check pushed blob sizes: %w", err)
	}
	return nil
}

// checkTreeDepth reads every new commit and tree once and computes the
// height of the new trees.
func (m *Manager) checkTreeDepth(ctx context.Context, dir string, env, tips []string, limit int) error {
	var ids []string
	flags := append([]string{"--filter=blob:none"}, newObjectsFlags...)
	err := m.scan(ctx, gitcmd.Cmd{Dir: dir, Name: "rev-list", Flags: flags, Args: tips, Env: env, Unbounded: true},
		func(r *bufio.Reader) error {
			for {
				line, err := r.ReadString('\n')
				if id := strings.TrimSpace(line); validOID(id) {
					ids = append(ids, id)
				}
				if err == io.EOF {
					return nil
				}
				if err != nil {
					return err
				}
			}
		})
	if err != nil {
		return fmt.Errorf("check pushed tree depth: %w", err)
	}
	if len(ids) == 0 {
		return nil
	}
	// children holds, for each new tree, its subtrees; roots the trees of
	// new commits.
	children := map[string][]string{}
	var roots []string
	err = m.readObjects(ctx, dir, env, ids, func(id, typ string, r *bufio.Reader, size int64) error {
		switch typ {
		case "commit":
			line, err := r.ReadString('\n')
			if err != nil {
				return err
			}
			if t, ok := strings.CutPrefix(strings.TrimSpace(line), "tree "); ok && validOID(t) {
				roots = append(roots, t)
			}
		case "tree":
			subs, err := subtrees(r, size, len(id)/2)
			if err != nil {
				return fmt.Errorf("tree %s: %w", id, err)
			}
			children[id] = subs
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("check pushed tree depth: %w", err)
	}
	height := treeHeights(children)
	for _, root := range roots {
		if h := height(root); h > limit {
			return problem.New(problem.Forbidden, "push refused: directories nested %d deep, deeper than git.max_tree_depth (%d)", h, limit)
		}
	}
	// A new tree reached only through an old one (a commit the repository
	// has, or a tag of a tree) is checked on its own.
	for id := range children {
		if h := height(id); h > limit {
			return problem.New(problem.Forbidden, "push refused: directories nested %d deep, deeper than git.max_tree_depth (%d)", h, limit)
		}
	}
	return nil
}

// treeHeights returns a function giving the height of a tree: 1 for a tree
// outside children (one the repository already has), else one more than
// its highest subtree. It walks with an explicit stack, not recursion, so a
// tree thousands of levels deep cannot exhaust the goroutine stack, and it
// remembers every height, so each tree is visited once.
func treeHeights(children map[string][]string) func(string) int {
	memo := map[string]int{}
	return func(root string) int {
		if _, ok := children[root]; !ok {
			return 1
		}
		type frame struct {
			id   string
			next int
		}
		stack := []frame{{id: root}}
		for len(stack) > 0 {
			f := &stack[len(stack)-1]
			if _, done := memo[f.id]; done {
				stack = stack[:len(stack)-1]
				continue
			}
			subs := children[f.id]
			if f.next < len(subs) {
				c := subs[f.next]
				f.next++
				if _, isNew := children[c]; isNew {
					if _, done := memo[c]; !done {
						stack = append(stack, frame{id: c})
					}
				}
				continue
			}
			h := 1
			for _, c := range subs {
				ch := 1
				if v, ok := memo[c]; ok {
					ch = v
				}
				h = max(h, ch+1)
			}
			memo[f.id] = h
			stack = stack[:len(stack)-1]
		}
		return memo[root]
	}
}

// subtrees reads a tree object's entries ("<mode> <name>\0<raw id>") and
// returns the ids of its subdirectories.
func subtrees(r *bufio.Reader, size int64, rawLen int) ([]string, error) {
	var subs []string
	raw := make([]byte, rawLen)
	for size > 0 {
		mode, err := r.ReadString(' ')
		if err != nil {
			return nil, err
		}
		name, err := r.ReadString(0)
		if err != nil {
			return nil, err
		}
		if _, err := io.ReadFull(r, raw); err != nil {
			return nil, err
		}
		size -= int64(len(mode) + len(name) + rawLen)
		if strings.TrimLeft(mode, "0") == "40000 " {
			subs = append(subs, hex.EncodeToString(raw))
		}
	}
	if size != 0 {
		return nil, fmt.Errorf("malformed tree")
	}
	return subs, nil
}

// readObjects reads ids through one `cat-file --batch` under env and hands
// each object's type and contents to fn, which may read any prefix of
// them; the rest is skipped.
func (m *Manager) readObjects(ctx context.Context, dir string, env, ids []string, fn func(id, typ string, r *bufio.Reader, size int64) error) error {
	var in bytes.Buffer
	for _, id := range ids {
		in.WriteString(id)
		in.WriteByte('\n')
	}
	return m.streamAll(ctx, gitcmd.Cmd{Dir: dir, Name: "cat-file", Flags: []string{"--batch"}, Stdin: &in, Env: env, Unbounded: true},
		func(r *bufio.Reader) error {
			for range ids {
				header, err := r.ReadString('\n')
				if err != nil {
					return fmt.Errorf("read object header: %w", err)
				}
				f := strings.Fields(header)
				if len(f) != 3 {
					return fmt.Errorf("unexpected cat-file output %q", header)
				}
				size, err := strconv.ParseInt(f[2], 10, 64)
				if err != nil {
					return fmt.Errorf("unexpected cat-file output %q", header)
				}
				body := bufio.NewReader(io.LimitReader(r, size))
				if err := fn(f[0], f[1], body, size); err != nil {
					return err
				}
				// Skip what fn left, then the newline after the contents.
				if _, err := io.Copy(io.Discard, body); err != nil {
					return err
				}
				if _, err := r.Discard(1); err != nil {
					return err
				}
			}
			return nil
		})
}
