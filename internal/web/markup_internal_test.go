package web

import (
	"testing"

	"github.com/sluice-scm/sluice/internal/entity"
	"github.com/sluice-scm/sluice/internal/pull"
	"github.com/sluice-scm/sluice/internal/store"
)

// TestMarkdownSameAsREST: a comment and a description render to the same
// HTML on a page as in the REST API's html and descriptionHtml fields
// (the renderer below is the one api wires), including the GFM the API
// once left as text and the link attributes it once left out.
func TestMarkdownSameAsREST(t *testing.T) {
	rest := &entity.Renderer{Markdown: pull.RenderMarkdown}
	for _, text := range []string{
		"",
		"Why **42**? See [the docs](https://example.com/docs) and docs/guide.md.",
		"| a | b |\n|---|---|\n| 1 | ~~2~~ |\n\n- [ ] a task\n- [x] done\n\nhttps://example.com/auto",
		"<script>alert(1)</script> [x](javascript:alert(1)) <b onclick=y>bold</b>",
		"```go\nfunc main() {}\n```\n",
	} {
		page := string(renderMarkdown([]byte(text)))
		if got := rest.Comment(&store.PullComment{Text: text}, &store.User{Name: "alice"}).HTML; got != page {
			t.Errorf("comment %q:\nREST %q\npage %q", text, got, page)
		}
		if got := rest.PullRequest(&store.PullRequest{Description: text}, nil, nil).DescriptionHTML; got != page {
			t.Errorf("description %q:\nREST %q\npage %q", text, got, page)
		}
	}
}
