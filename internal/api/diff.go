package api

import (
	"strconv"
	"strings"
)

// parseDiff turns git's unified diff (diff-tree -p -M) into Bitbucket's
// structured diff: files, hunks, and segments of ADDED, REMOVED and
// CONTEXT lines with their line numbers. It stops after maxLines diff lines
// and then reports truncated.

type diffLineJSON struct {
	Source      int    `json:"source"`
	Destination int    `json:"destination"`
	Line        string `json:"line"`
	Truncated   bool   `json:"truncated"`
}

type segmentJSON struct {
	Type      string         `json:"type"`
	Lines     []diffLineJSON `json:"lines"`
	Truncated bool           `json:"truncated"`
}

type hunkJSON struct {
	SourceLine      int           `json:"sourceLine"`
	SourceSpan      int           `json:"sourceSpan"`
	DestinationLine int           `json:"destinationLine"`
	DestinationSpan int           `json:"destinationSpan"`
	Segments        []segmentJSON `json:"segments"`
	Truncated       bool          `json:"truncated"`
}

type diffJSON struct {
	Source      *pathJSON  `json:"source"`
	Destination *pathJSON  `json:"destination"`
	Hunks       []hunkJSON `json:"hunks"`
	Binary      bool       `json:"binary,omitempty"`
	Truncated   bool       `json:"truncated"`
	// TooLarge is Sluice's own: the file's old or new side is over
	// git.max_diff_blob_size, so it was not diffed. Git shows it as
	// binary; without this a client would call a huge text file a
	// picture. Left out otherwise, so ordinary diffs keep Bitbucket's
	// shape.
	TooLarge bool `json:"tooLarge,omitempty"`
}

// binaryPaths lists the names, old and new, of the binary files in diffs:
// the only ones that can be too large to diff.
func binaryPaths(diffs []diffJSON) []string {
	var paths []string
	for _, d := range diffs {
		if !d.Binary {
			continue
		}
		for _, p := range []*pathJSON{d.Source, d.Destination} {
			if p != nil && p.ToString != "" {
				paths = append(paths, p.ToString)
			}
		}
	}
	return paths
}

// markTooLarge flags the binary files of diffs that big (from
// repo.Manager.DiffTooLarge) names.
func markTooLarge(diffs []diffJSON, big map[string]int64) {
	for i := range diffs {
		d := &diffs[i]
		if !d.Binary {
			continue
		}
		for _, p := range []*pathJSON{d.Source, d.Destination} {
			if p != nil && big[p.ToString] > 0 {
				d.TooLarge, d.Truncated = true, true
			}
		}
	}
}

// maxDiffLineLen cuts single lines (minified files) as Bitbucket does.
const maxDiffLineLen = 10_000

func parseDiff(text []byte, maxLines int) ([]diffJSON, bool) {
	diffs := []diffJSON{}
	var (
		cur        *diffJSON
		hunk       *hunkJSON
		src, dst   int
		inHeader   bool
		lines      int
		headerPath string
	)
	finish := func() {
		if cur == nil {
			return
		}
		if cur.Source == nil && cur.Destination == nil && headerPath != "" {
			// Mode-only or binary changes have no ---/+++ lines.
			p := pathOf(headerPath)
			cur.Source, cur.Destination = &p, &p
		}
		diffs = append(diffs, *cur)
		cur, hunk = nil, nil
	}
	all := strings.Split(string(text), "\n")
	if len(all) > 0 && all[len(all)-1] == "" {
		all = all[:len(all)-1]
	}
	for _, l := range all {
		if strings.HasPrefix(l, "diff --git ") {
			finish()
			cur = &diffJSON{Hunks: []hunkJSON{}}
			inHeader = true
			headerPath = samePathHeader(strings.TrimPrefix(l, "diff --git "))
			continue
		}
		if cur == nil {
			continue
		}
		if inHeader {
			switch {
			case strings.HasPrefix(l, "--- "):
				cur.Source = diffPath(strings.TrimPrefix(l, "--- "), "a/")
			case strings.HasPrefix(l, "+++ "):
				cur.Destination = diffPath(strings.TrimPrefix(l, "+++ "), "b/")
			case strings.HasPrefix(l, "rename from "):
				p := pathOf(unquoteGitPath(strings.TrimPrefix(l, "rename from ")))
				cur.Source = &p
			case strings.HasPrefix(l, "rename to "):
				p := pathOf(unquoteGitPath(strings.TrimPrefix(l, "rename to ")))
				cur.Destination = &p
			case strings.HasPrefix(l, "Binary files "):
				cur.Binary = true
			case strings.HasPrefix(l, "@@ "):
				inHeader = false
			}
			if inHeader {
				continue
			}
		}
		if strings.HasPrefix(l, "@@ ") {
			h, ok := parseHunkHeader(l)
			if !ok {
				continue
			}
			cur.Hunks = append(cur.Hunks, h)
			hunk = &cur.Hunks[len(cur.Hunks)-1]
			src, dst = h.SourceLine, h.DestinationLine
			continue
		}
		if hunk == nil || l == "" {
			continue
		}
		var typ string
		var dl diffLineJSON
		switch l[0] {
		case ' ':
			typ, dl = "CONTEXT", diffLineJSON{Source: src, Destination: dst}
			src++
			dst++
		case '-':
			typ, dl = "REMOVED", diffLineJSON{Source: src, Destination: dst}
			src++
		case '+':
			typ, dl = "ADDED", diffLineJSON{Source: src, Destination: dst}
			dst++
		default: // "\ No newline at end of file"
			continue
		}
		if lines >= maxLines {
			hunk.Truncated, cur.Truncated = true, true
			finish()
			return diffs, true
		}
		lines++
		dl.Line = l[1:]
		if len(dl.Line) > maxDiffLineLen {
			dl.Line, dl.Truncated = dl.Line[:maxDiffLineLen], true
		}
		if n := len(hunk.Segments); n > 0 && hunk.Segments[n-1].Type == typ {
			hunk.Segments[n-1].Lines = append(hunk.Segments[n-1].Lines, dl)
		} else {
			hunk.Segments = append(hunk.Segments, segmentJSON{Type: typ, Lines: []diffLineJSON{dl}})
		}
	}
	finish()
	return diffs, false
}

// parseHunkHeader parses "@@ -a,b +c,d @@ …" (a span of 1 may be left
// out).
func parseHunkHeader(l string) (hunkJSON, bool) {
	f := strings.Fields(l)
	if len(f) < 4 || f[3] != "@@" || !strings.HasPrefix(f[1], "-") || !strings.HasPrefix(f[2], "+") {
		return hunkJSON{}, false
	}
	sl, ss, ok1 := lineSpan(f[1][1:])
	dl, ds, ok2 := lineSpan(f[2][1:])
	if !ok1 || !ok2 {
		return hunkJSON{}, false
	}
	return hunkJSON{SourceLine: sl, SourceSpan: ss, DestinationLine: dl, DestinationSpan: ds, Segments: []segmentJSON{}}, true
}

func lineSpan(s string) (line, span int, ok bool) {
	a, b, hasSpan := strings.Cut(s, ",")
	line, err := strconv.Atoi(a)
	if err != nil {
		return 0, 0, false
	}
	span = 1
	if hasSpan {
		if span, err = strconv.Atoi(b); err != nil {
			return 0, 0, false
		}
	}
	return line, span, true
}

// diffPath reads the path of a ---/+++ line; /dev/null is no file.
func diffPath(s, side string) *pathJSON {
	s = strings.TrimSuffix(s, "\t")
	if s == "/dev/null" {
		return nil
	}
	p := pathOf(strings.TrimPrefix(unquoteGitPath(s), side))
	return &p
}

// unquoteGitPath undoes git's C-style quoting of unusual file names
// ("a/caf\303\251"); Go's unquoting reads the same octal escapes.
func unquoteGitPath(s string) string {
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		if u, err := strconv.Unquote(s); err == nil {
			return u
		}
	}
	return s
}

// samePathHeader extracts P from "a/P b/P", the header of a change that
// keeps the file's name; "" when the two names differ or are quoted.
func samePathHeader(s string) string {
	if len(s) < 7 || (len(s)-5)%2 != 0 || !strings.HasPrefix(s, "a/") {
		return ""
	}
	n := (len(s) - 5) / 2
	p := s[2 : 2+n]
	if s[2+n:] != " b/"+p {
		return ""
	}
	return p
}
