package pull

import (
	"context"
	"fmt"

	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/store"
)

// Comment drift. An inline comment is anchored to a line of one side of
// the diff: the source side (fileType TO) or the target side (FROM). When
// that side moves to a new commit, the line is mapped through the diff
// between the old and the new commit of that file (-U0: only changed
// lines): hunks wholly above the line shift it by what they add minus what
// they remove; a hunk that removes or rewrites the line itself means the
// line is gone, and the comment is marked outdated where it was. A renamed
// file carries its comments to the new path; a deleted one outdates them.

// lineRange is the old side of one -U0 hunk and its new length.
type lineRange struct {
	oldStart, oldLen, newLen int
}

// fileMap is what happened to one file between two commits.
type fileMap struct {
	newPath string // "" when the file was deleted
	hunks   []lineRange
}

// mapLine follows old line n through the hunks (in order). ok is false when
// the line was removed or rewritten.
func mapLine(hunks []lineRange, n int) (int, bool) {
	delta := 0
	for _, h := range hunks {
		if h.oldLen == 0 {
			// Pure insertion after line oldStart.
			if h.oldStart < n {
				delta += h.newLen
				continue
			}
			break
		}
		end := h.oldStart + h.oldLen - 1
		if n < h.oldStart {
			break
		}
		if n <= end {
			return 0, false
		}
		delta += h.newLen - h.oldLen
	}
	return n + delta, true
}

// fileMaps diffs old against new with -U0 and returns, per old path, where
// its lines went. Files absent from the result did not change.
func (s *Service) fileMaps(ctx context.Context, dir, oldSHA, newSHA string) (map[string]fileMap, error) {
	out, err := s.git.OutputLimit(ctx, gitcmd.Cmd{Dir: dir, Name: "diff-tree",
		Flags: []string{"-r", "-p", "-M", "-U0", "--no-color", "--no-ext-diff"}, Args: []string{oldSHA, newSHA}}, 64<<20)
	if err != nil {
		return nil, fmt.Errorf("diff for comment drift: %w", err)
	}
	maps := map[string]fileMap{}
	for _, f := range splitFiles(out) {
		if f.src == "" {
			continue // an added file had no comments
		}
		fm := fileMap{newPath: f.dst}
		for _, h := range parseHunks(f.body) {
			// git writes an empty old side as "-n,0" meaning "after line n".
			fm.hunks = append(fm.hunks, lineRange{oldStart: h.SourceLine, oldLen: h.SourceSpan, newLen: h.DestinationSpan})
		}
		maps[f.src] = fm
	}
	return maps, nil
}

// drift moves the inline comments of pr after a rescope from oldBase and
// oldFrom to pr's current commits.
func (s *Service) drift(ctx context.Context, pr *store.PullRequest, oldBase, oldFrom string) error {
	comments, err := s.ps.ListComments(ctx, pr.ID)
	if err != nil {
		return err
	}
	dir := s.repos.Path(pr.RepoID)
	var toMaps, fromMaps map[string]fileMap
	for i := range comments {
		c := &comments[i]
		if c.Path == "" || c.ParentID != 0 || c.Outdated {
			continue
		}
		var maps map[string]fileMap
		switch {
		case c.FileType == "FROM" && oldBase != pr.BaseSHA:
			if fromMaps == nil {
				if fromMaps, err = s.fileMaps(ctx, dir, oldBase, pr.BaseSHA); err != nil {
					return err
				}
			}
			maps = fromMaps
		case c.FileType != "FROM" && oldFrom != pr.FromSHA:
			if toMaps == nil {
				if toMaps, err = s.fileMaps(ctx, dir, oldFrom, pr.FromSHA); err != nil {
					return err
				}
			}
			maps = toMaps
		default:
			continue
		}
		moved := *c
		moved.FromSHA, moved.ToSHA = pr.BaseSHA, pr.FromSHA
		if fm, changed := maps[c.Path]; changed {
			switch {
			case fm.newPath == "":
				moved.Outdated = true
			default:
				moved.Path = fm.newPath
				if c.Line > 0 {
					n, ok := mapLine(fm.hunks, c.Line)
					if ok {
						moved.Line = n
					} else {
						moved.Outdated = true
					}
				}
			}
		}
		if err := s.ps.MoveComment(ctx, &moved); err != nil {
			return err
		}
	}
	return nil
}
