package markup

import (
	"strings"
	"testing"

	"golang.org/x/net/html"
)

func TestHTML(t *testing.T) {
	cases := []struct {
		name, src string
		has       []string // substrings the HTML must contain
		hasNot    []string // and must not
	}{
		{"empty", "", nil, []string{"<"}},
		{"emphasis", "Why **42**?", []string{"<p>Why <strong>42</strong>?</p>"}, nil},
		{"table (GFM)", "| a | b |\n|---|---|\n| 1 | 2 |\n", []string{"<table>", "<td>1</td>"}, nil},
		{"strikethrough (GFM)", "~~old~~", []string{"<del>old</del>"}, nil},
		{"autolink (GFM)", "see https://example.com/x", []string{`<a href="https://example.com/x" rel="nofollow noreferrer">`}, nil},
		{"link", "[docs](https://example.com)", []string{`rel="nofollow noreferrer"`}, []string{"target="}},
		{"relative link kept", "[guide](docs/guide.md)", []string{`href="docs/guide.md"`}, nil},
		{"raw HTML dropped", "hi <script>alert(1)</script> <b onclick=x>b</b>", nil, []string{"<script", "onclick", "alert(1)</script>"}},
		{"javascript link", "[x](javascript:alert(1))", nil, []string{"javascript:"}},
		{"image with javascript", "![x](javascript:alert(1))", nil, []string{"javascript:"}},
		{"code is escaped", "`<b>` and\n\n```\n<i>x</i>\n```\n", []string{"<code>&lt;b&gt;</code>", "&lt;i&gt;x&lt;/i&gt;"}, []string{"<b>", "<i>"}},
	}
	for _, c := range cases {
		got := HTML(c.src)
		for _, s := range c.has {
			if !strings.Contains(got, s) {
				t.Errorf("%s: %q lacks %q", c.name, got, s)
			}
		}
		for _, s := range c.hasNot {
			if strings.Contains(got, s) {
				t.Errorf("%s: %q contains %q", c.name, got, s)
			}
		}
	}
}

// FuzzHTML: whatever the source, the HTML has no element that runs or
// styles anything, no event handler and no javascript: URL, and rendering
// does not panic. It reads the output as a browser would (tokenised, with
// entities decoded), not as text: a comment may well say "javascript:".
func FuzzHTML(f *testing.F) {
	for _, s := range []string{"", "**b**", "<script>x</script>", "[x](javascript:alert(1))", "<img src=x onerror=alert(1)>",
		"| a |\n|---|\n| <b onclick=y> |", "[x](  JaVaScRiPt:alert(1) )", "<a href=\"javascript&#58;x\">y</a>",
		"[x](java\tscript:alert(1))", "- [ ] task\n- [x] done", "javascript: is not a link"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		out := HTML(src)
		z := html.NewTokenizer(strings.NewReader(out))
		for {
			tt := z.Next()
			if tt == html.ErrorToken {
				return
			}
			tok := z.Token()
			switch tok.Data {
			case "script", "style", "iframe", "object", "embed", "form", "input":
				if tt != html.TextToken {
					t.Fatalf("%q renders %q: a <%s> element", src, out, tok.Data)
				}
			}
			for _, a := range tok.Attr {
				key := strings.ToLower(a.Key)
				val := strings.ToLower(strings.Map(func(r rune) rune {
					if r <= ' ' {
						return -1 // browsers ignore controls and spaces in a scheme
					}
					return r
				}, a.Val))
				if strings.HasPrefix(key, "on") || key == "style" ||
					((key == "href" || key == "src") && (strings.HasPrefix(val, "javascript:") || strings.HasPrefix(val, "vbscript:") || strings.HasPrefix(val, "data:text/html"))) {
					t.Fatalf("%q renders %q: attribute %s=%q", src, out, a.Key, a.Val)
				}
			}
		}
	})
}
