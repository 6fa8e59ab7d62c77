package web

import (
	"bytes"
	"os"
	"testing"

	"github.com/alecthomas/chroma/v2/formatters/html"
	"github.com/alecthomas/chroma/v2/styles"
)

// chromaCSS is the syntax-highlighting stylesheet: chroma's github style,
// and github-dark for dark mode. It is generated here and checked in as
// static/chroma.css rather than built at start, because chroma's styles
// package parses every style at init — about 8 ms in every process of the
// sluice binary, and git runs that binary as a hook several times per push.
func chromaCSS(t *testing.T) []byte {
	var buf bytes.Buffer
	buf.WriteString("/* Syntax highlighting (chroma). Generated: SLUICE_UPDATE_CHROMA_CSS=1 go test ./internal/web -run TestChromaCSS */\n")
	formatter := html.New(html.WithClasses(true))
	if err := formatter.WriteCSS(&buf, styles.Get("github")); err != nil {
		t.Fatal(err)
	}
	buf.WriteString("\n@media (prefers-color-scheme: dark) {\n")
	if err := formatter.WriteCSS(&buf, styles.Get("github-dark")); err != nil {
		t.Fatal(err)
	}
	buf.WriteString("}\n")
	return buf.Bytes()
}

func TestChromaCSS(t *testing.T) {
	want := chromaCSS(t)
	if os.Getenv("SLUICE_UPDATE_CHROMA_CSS") == "1" {
		if err := os.WriteFile("static/chroma.css", want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile("static/chroma.css")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("static/chroma.css is out of date; regenerate with SLUICE_UPDATE_CHROMA_CSS=1 go test ./internal/web -run TestChromaCSS")
	}
}
