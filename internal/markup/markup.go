// Package markup renders the Markdown users write — pull request
// descriptions, comments, README and other .md files — into HTML that is
// safe to put in a page. It is the one pipeline: the REST API's html and
// descriptionHtml fields, webhook payloads and the web UI all call HTML,
// so a comment reads the same wherever it is shown.
//
// The pipeline has two stages, and both are needed. goldmark parses
// GitHub Flavored Markdown (tables, strikethrough, autolinks, task lists)
// and, not being run with WithUnsafe, drops raw HTML from the source.
// bluemonday's user-generated-content policy then removes what Markdown
// itself can express but a page must not carry: javascript: and other
// unsafe URLs, event handlers, style. Links get rel="nofollow noreferrer":
// a link in a comment is the commenter's, not the server's, and the
// page's address (which names private repositories) must not leak to the
// site it points to.
//
// The package is below every transport and service: it reads nothing and
// keeps no state but the parser and the policy, both safe for concurrent
// use.
package markup

import (
	"bytes"
	"html"
	"sync"

	"github.com/microcosm-cc/bluemonday"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/extension"
)

var (
	markdown = goldmark.New(goldmark.WithExtensions(extension.GFM))
	// policy is built on first use: bluemonday compiles its patterns then,
	// and a node that never renders Markdown need not pay for it.
	policy = sync.OnceValue(func() *bluemonday.Policy {
		p := bluemonday.UGCPolicy()
		p.RequireNoReferrerOnLinks(true)
		p.AddTargetBlankToFullyQualifiedLinks(false)
		return p
	})
)

// HTML renders Markdown source as sanitized HTML; empty source is empty
// HTML. Callers bound the source's size (a README is cut before it gets
// here; comments are bounded when they are written).
func HTML(src string) string {
	if src == "" {
		return ""
	}
	var buf bytes.Buffer
	if err := markdown.Convert([]byte(src), &buf); err != nil {
		// goldmark fails only when writing fails, which a bytes.Buffer
		// does not; should it ever, the text is still shown, escaped.
		return html.EscapeString(src)
	}
	return policy().Sanitize(buf.String())
}
