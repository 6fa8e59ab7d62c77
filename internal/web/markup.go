package web

import (
	"bytes"
	"html/template"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/alecthomas/chroma/v2"
	"github.com/alecthomas/chroma/v2/lexers"

	"github.com/sluice-scm/sluice/internal/markup"
)

// Rendering of user content: Markdown, highlighted source, diffs. Each
// function here returns template.HTML it built itself from escaped text
// (highlighting, diffs) or that markup sanitized (Markdown); nothing else
// is ever marked safe.

// Limits that keep a page within its time budget on the small machines
// Sluice targets. Chroma tokenises a few MiB per second; 256 KiB or 5000
// lines keep highlighting under ~50 ms, beyond that a file is shown plain.
const (
	maxViewBytes      = 1 << 20 // a file bigger than this is "too large to show"
	maxHighlightBytes = 256 << 10
	maxHighlightLines = 5000
	maxReadmeBytes    = 512 << 10
	maxDiffBytes      = 2 << 20 // a commit diff is cut here
	maxDiffLines      = 10_000  // as Bitbucket's page.max.diff.lines
	maxFileDiffLines  = 3000    // one file's diff beyond this is collapsed
)

// renderMarkdown is markup.HTML as a template value. It is the pipeline
// the REST API renders html and descriptionHtml with, so a comment or a
// description reads the same on a page as through the API.
func renderMarkdown(src []byte) template.HTML {
	return template.HTML(markup.HTML(string(src)))
}

// isBinary uses git's own test: a NUL byte in the first 8000 bytes.
func isBinary(data []byte) bool {
	return bytes.IndexByte(data[:min(len(data), 8000)], 0) >= 0
}

// isMarkdown reports whether a file name is a Markdown document.
func isMarkdown(name string) bool {
	switch strings.ToLower(path.Ext(name)) {
	case ".md", ".markdown", ".mdown", ".mkd":
		return true
	}
	return false
}

// codeLine is one line of a file view.
type codeLine struct {
	N    int
	HTML template.HTML
}

// highlight splits a text file into lines, highlighted by chroma when
// the file is small enough and chroma knows its language by name.
func highlight(name string, data []byte) []codeLine {
	text := strings.ToValidUTF8(string(data), "\uFFFD")
	text = strings.TrimSuffix(text, "\n")
	lexer := lexers.Match(path.Base(name))
	lines := strings.Count(text, "\n") + 1
	if lexer == nil || len(data) > maxHighlightBytes || lines > maxHighlightLines {
		return plainLines(text)
	}
	it, err := chroma.Coalesce(lexer).Tokenise(nil, text+"\n")
	if err != nil {
		return plainLines(text)
	}
	out := make([]codeLine, 0, lines)
	var b strings.Builder
	for i, toks := range chroma.SplitTokensIntoLines(it.Tokens()) {
		b.Reset()
		for _, t := range toks {
			v := strings.TrimSuffix(t.Value, "\n")
			if v == "" {
				continue
			}
			if cls := tokenClass(t.Type); cls != "" {
				b.WriteString(`<span class="` + cls + `">`)
				template.HTMLEscape(&b, []byte(v))
				b.WriteString("</span>")
			} else {
				template.HTMLEscape(&b, []byte(v))
			}
		}
		out = append(out, codeLine{N: i + 1, HTML: template.HTML(b.String())})
	}
	return out
}

// tokenClass is the CSS class chroma's stylesheet uses for t, falling
// back to the token's category as chroma's own formatter does.
func tokenClass(t chroma.TokenType) string {
	for _, tt := range []chroma.TokenType{t, t.SubCategory(), t.Category()} {
		if cls, ok := chroma.StandardTypes[tt]; ok && cls != "" {
			return cls
		}
	}
	return ""
}

func plainLines(text string) []codeLine {
	parts := strings.Split(text, "\n")
	out := make([]codeLine, len(parts))
	for i, p := range parts {
		out[i] = codeLine{N: i + 1, HTML: template.HTML(template.HTMLEscapeString(p))}
	}
	return out
}

// Diffs.

// diffFile is one file of a parsed unified diff.
type diffFile struct {
	OldPath, NewPath string
	Status           string // "added", "deleted", "renamed", "modified", "mode"
	Binary           bool
	Hunks            []diffHunk
	Added, Deleted   int
	Lines            int
	// TooLarge is set when the file's diff was collapsed or cut.
	TooLarge bool
	// SizeLimit is git.max_diff_blob_size when one side of the file is
	// over it: git then calls the file binary without reading it, and the
	// page says why it shows nothing instead.
	SizeLimit int64
	Anchor    string
}

// Path is the file's current name (the old one for a deletion).
func (f diffFile) Path() string {
	if f.NewPath != "" {
		return f.NewPath
	}
	return f.OldPath
}

type diffHunk struct {
	Header string
	Lines  []diffLine
}

type diffLine struct {
	Kind   string // "ctx", "add", "del", "note"
	Old    int    // 0 when the line is not on the old side
	New    int
	Text   string
	Anchor string // "<file anchor>-L<new>" or "-O<old>", for inline comments
}

// parseDiff parses git's unified diff (diff-tree -p). It stops after
// maxLines lines and reports whether it did.
func parseDiff(text []byte, maxLines int) ([]diffFile, bool) {
	var files []diffFile
	var f *diffFile
	var h *diffHunk
	oldN, newN, total := 0, 0, 0
	cut := false
	for line := range strings.SplitSeq(string(text), "\n") {
		switch {
		case strings.HasPrefix(line, "diff --git "):
			files = append(files, diffFile{Status: "modified"})
			f, h = &files[len(files)-1], nil
			f.OldPath, f.NewPath = splitGitPaths(strings.TrimPrefix(line, "diff --git "))
			f.Anchor = "f" + strconv.Itoa(len(files))
			continue
		case f == nil:
			continue
		}
		if h == nil {
			switch {
			case strings.HasPrefix(line, "new file mode"):
				f.Status = "added"
			case strings.HasPrefix(line, "deleted file mode"):
				f.Status = "deleted"
			case strings.HasPrefix(line, "rename from "):
				f.Status, f.OldPath = "renamed", unquoteGit(strings.TrimPrefix(line, "rename from "))
			case strings.HasPrefix(line, "rename to "):
				f.NewPath = unquoteGit(strings.TrimPrefix(line, "rename to "))
			case strings.HasPrefix(line, "Binary files "):
				f.Binary = true
			case strings.HasPrefix(line, "--- "):
				if p := strings.TrimPrefix(line, "--- "); p == "/dev/null" {
					f.OldPath = ""
				}
			case strings.HasPrefix(line, "+++ "):
				if p := strings.TrimPrefix(line, "+++ "); p == "/dev/null" {
					f.NewPath = ""
				}
			}
		}
		if strings.HasPrefix(line, "@@ ") {
			oldN, newN = parseHunkHeader(line)
			f.Hunks = append(f.Hunks, diffHunk{Header: line})
			h = &f.Hunks[len(f.Hunks)-1]
			continue
		}
		if h == nil || line == "" {
			continue
		}
		if f.TooLarge {
			continue
		}
		if total >= maxLines {
			cut, f.TooLarge = true, true
			continue
		}
		if f.Lines >= maxFileDiffLines {
			f.TooLarge = true
			continue
		}
		dl := diffLine{Text: line[1:]}
		switch line[0] {
		case '+':
			dl.Kind, dl.New = "add", newN
			newN++
			f.Added++
		case '-':
			dl.Kind, dl.Old = "del", oldN
			oldN++
			f.Deleted++
		case ' ':
			dl.Kind, dl.Old, dl.New = "ctx", oldN, newN
			oldN++
			newN++
		case '\\':
			dl.Kind, dl.Text = "note", line
		default:
			continue
		}
		if dl.New > 0 {
			dl.Anchor = f.Anchor + "-L" + strconv.Itoa(dl.New)
		} else if dl.Old > 0 {
			dl.Anchor = f.Anchor + "-O" + strconv.Itoa(dl.Old)
		}
		h.Lines = append(h.Lines, dl)
		f.Lines++
		total++
	}
	return files, cut
}

// parseHunkHeader reads "@@ -a,b +c,d @@" and returns a and c.
func parseHunkHeader(s string) (oldStart, newStart int) {
	f := strings.Fields(s)
	if len(f) < 3 {
		return 1, 1
	}
	num := func(x string) int {
		x = strings.TrimLeft(x, "-+")
		x, _, _ = strings.Cut(x, ",")
		n, _ := strconv.Atoi(x)
		return n
	}
	return num(f[1]), num(f[2])
}

// splitGitPaths splits `a/old b/new` (either side possibly C-quoted).
func splitGitPaths(s string) (string, string) {
	if strings.HasPrefix(s, `"`) {
		// Quoted old path: find its closing quote.
		for i := 1; i < len(s); i++ {
			if s[i] == '\\' {
				i++
				continue
			}
			if s[i] == '"' {
				return trimSide(unquoteGit(s[:i+1])), trimSide(unquoteGit(strings.TrimSpace(s[i+1:])))
			}
		}
		return "", ""
	}
	if strings.HasSuffix(s, `"`) {
		if i := strings.Index(s, ` "`); i >= 0 {
			return trimSide(s[:i]), trimSide(unquoteGit(s[i+1:]))
		}
	}
	// Unquoted: "a/x b/x"; the two halves are equal unless renamed, in
	// which case the rename lines give the names anyway.
	if i := strings.Index(s, " b/"); i >= 0 {
		return trimSide(s[:i]), trimSide(s[i+1:])
	}
	return s, s
}

func trimSide(p string) string {
	if len(p) > 2 && (p[:2] == "a/" || p[:2] == "b/") {
		return p[2:]
	}
	return p
}

// unquoteGit undoes git's C-style quoting of unusual path names.
func unquoteGit(s string) string {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return s
	}
	if u, err := strconv.Unquote(s); err == nil && utf8.ValidString(u) {
		return u
	}
	return s[1 : len(s)-1]
}

// splitRow is one row of the side-by-side view.
type splitRow struct {
	Left, Right *diffLine
}

// splitHunk pairs a hunk's deletions with the additions that follow them,
// for the side-by-side view.
func splitHunk(h diffHunk) []splitRow {
	var rows []splitRow
	lines := h.Lines
	for i := 0; i < len(lines); {
		l := &lines[i]
		switch l.Kind {
		case "del":
			j := i
			for j < len(lines) && lines[j].Kind == "del" {
				j++
			}
			k := j
			for k < len(lines) && lines[k].Kind == "add" {
				k++
			}
			dels, adds := lines[i:j], lines[j:k]
			for n := 0; n < max(len(dels), len(adds)); n++ {
				var r splitRow
				if n < len(dels) {
					r.Left = &dels[n]
				}
				if n < len(adds) {
					r.Right = &adds[n]
				}
				rows = append(rows, r)
			}
			i = k
		case "add":
			rows = append(rows, splitRow{Right: l})
			i++
		default:
			rows = append(rows, splitRow{Left: l, Right: l})
			i++
		}
	}
	return rows
}
