package bulkimport

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sluice-scm/sluice/internal/gitref"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
)

func repoKey(r Record) string { return r.Project + "/" + r.Slug }

func (im *importer) repositories(ctx context.Context) error {
	// Rows first, in one bulk insert per batch; a fork's parent earlier
	// in the same batch is inserted before the fork so its id is known.
	var todo []pending
	seen := map[string]bool{}
	var rows []store.Repository
	flushRows := func() error {
		if len(rows) == 0 {
			return nil
		}
		if err := im.d.DB.BulkCreateRepos(ctx, rows); err != nil {
			return err
		}
		im.created.Repositories += len(rows)
		im.touched(store.BulkRepos)
		rows = rows[:0]
		return nil
	}
	for _, p := range im.batch {
		r := p.rec
		if err := validRepo(r); err != nil {
			return lineErr(p, "%s", problem.Message(err))
		}
		k := lookupKey(store.BulkRepos, repoKey(r))
		id, err := im.lookup(ctx, store.BulkRepos, k)
		if err != nil {
			return err
		}
		if seen[k] {
			continue
		}
		seen[k] = true
		todo = append(todo, p)
		if id != 0 {
			continue // the row exists; its directory may not (below)
		}
		pid, err := im.need(ctx, p, store.BulkProjects, "project", r.Project)
		if err != nil {
			return err
		}
		var parent int64
		if r.ForkOf != "" {
			pk := lookupKey(store.BulkRepos, r.ForkOf)
			if seen[pk] {
				if err := flushRows(); err != nil {
					return err
				}
			}
			if parent, err = im.need(ctx, p, store.BulkRepos, "repository", r.ForkOf); err != nil {
				return err
			}
		}
		name := r.Name
		if name == "" {
			name = r.Slug
		}
		rows = append(rows, store.Repository{ProjectID: pid, Slug: r.Slug, Name: name, Description: r.Description,
			Public: r.Public, DefaultBranch: defaultBranch(r), ForkOf: parent, CreatedAt: r.CreatedAt})
	}
	if err := flushRows(); err != nil {
		return err
	}
	// Then the directories, in file order: a parent before its forks.
	for _, p := range todo {
		id, err := im.need(ctx, p, store.BulkRepos, "repository", repoKey(p.rec))
		if err != nil {
			return err
		}
		if err := im.onDisk(ctx, p, id); err != nil {
			return err
		}
	}
	return nil
}

func defaultBranch(r Record) string {
	if r.DefaultBranch == "" {
		return "main"
	}
	return r.DefaultBranch
}

func validRepo(r Record) error {
	if err := validImportKey(r.Project); err != nil {
		return err
	}
	if err := store.ValidateSlug(r.Slug); err != nil {
		return err
	}
	if r.Name != "" {
		if err := store.ValidateRepoName(r.Name); err != nil {
			return err
		}
	}
	if err := repo.ValidateBranchName(defaultBranch(r)); err != nil {
		return err
	}
	if r.History != "" && r.ForkOf != "" {
		return problem.New(problem.Invalid, "a repository has a history or is a fork, not both")
	}
	if r.History != "" && !filepath.IsAbs(r.History) {
		return problem.New(problem.Invalid, "history %q is not an absolute path", r.History)
	}
	return nil
}

// onDisk makes repository id's directory, unless an earlier import made
// it. A history repository is complete once its packed-refs exists,
// which is written last.
func (im *importer) onDisk(ctx context.Context, p pending, id int64) error {
	m := im.d.Repos
	r := p.rec
	switch {
	case r.History != "":
		if m.Exists(id) {
			if _, err := os.Stat(filepath.Join(m.Path(id), "packed-refs")); err == nil {
				return nil
			}
		} else if err := m.Create(ctx, id, defaultBranch(r)); err != nil {
			return lineErr(p, "create: %v", err)
		}
		if err := copyHistory(r.History, m.Path(id)); err != nil {
			return lineErr(p, "history: %v", err)
		}
	case r.ForkOf != "":
		if m.Exists(id) {
			return nil
		}
		parent, err := im.need(ctx, p, store.BulkRepos, "repository", r.ForkOf)
		if err != nil {
			return err
		}
		if err := m.Fork(ctx, parent, id); err != nil {
			return lineErr(p, "fork of %s: %s", r.ForkOf, problem.Message(err))
		}
	default:
		if m.Exists(id) {
			return nil
		}
		if err := m.Create(ctx, id, defaultBranch(r)); err != nil {
			return lineErr(p, "create: %s", problem.Message(err))
		}
	}
	return nil
}

// copyHistory gives the repository at dst src's objects and refs. Packs
// and loose objects are immutable once written, so hard links share them
// safely; refs are read from files (no git process: only gitcmd runs git)
// and written as one packed-refs file, through a rename so that its
// presence means the copy is complete.
func copyHistory(src, dst string) error {
	if _, err := os.Stat(filepath.Join(src, "objects", "info", "alternates")); err == nil {
		return fmt.Errorf("%s borrows objects through alternates; import a self-contained repository", src)
	}
	refs, err := readRefs(src)
	if err != nil {
		return err
	}
	if len(refs) == 0 {
		return fmt.Errorf("%s has no refs", src)
	}
	objects := filepath.Join(src, "objects")
	err = filepath.WalkDir(objects, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(objects, path)
		if rel == "info" && e.IsDir() {
			return filepath.SkipDir
		}
		target := filepath.Join(dst, "objects", rel)
		if e.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !e.Type().IsRegular() {
			return nil
		}
		if _, err := os.Lstat(target); err == nil {
			return nil
		}
		if err := os.Link(path, target); err == nil {
			return nil
		}
		return copyFile(path, target)
	})
	if err != nil {
		return err
	}
	var b strings.Builder
	names := make([]string, 0, len(refs))
	for name := range refs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(&b, "%s %s\n", refs[name], name)
	}
	tmp := filepath.Join(dst, "packed-refs.import")
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dst, "packed-refs"))
}

// readRefs reads a bare repository's branches and tags from its files
// (repo.ReadRefFiles: packed-refs, then loose refs, which win). Symbolic
// refs and anything that is not a valid name and object id are left out.
func readRefs(dir string) (map[string]string, error) {
	all, _, err := repo.ReadRefFiles(dir, func(ref string) bool {
		return ref == "refs/heads/" || ref == "refs/tags/" ||
			strings.HasPrefix(ref, "refs/heads/") || strings.HasPrefix(ref, "refs/tags/")
	})
	if err != nil {
		return nil, err
	}
	refs := map[string]string{}
	for name, oid := range all {
		addRef(refs, name, oid)
	}
	return refs, nil
}

func addRef(refs map[string]string, name, oid string) {
	if !strings.HasPrefix(name, "refs/heads/") && !strings.HasPrefix(name, "refs/tags/") {
		return
	}
	if repo.ValidateRefName(name) != nil || !gitref.ValidObjectID(oid) {
		return
	}
	refs[name] = oid
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o444)
}

// validImportKey is store.ValidateProjectKey without personal projects:
// a "~user" key is valid only for a user who exists, and a bulk import
// writes its rows past the checks that know that, so it takes none.
func validImportKey(k string) error {
	if err := store.ValidateProjectKey(k); err != nil {
		return err
	}
	if _, personal := store.IsPersonalKey(k); personal {
		return problem.New(problem.Invalid, "project key %q: personal projects are not imported", k)
	}
	return nil
}
