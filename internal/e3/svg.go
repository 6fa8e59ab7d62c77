package e3

import (
	"fmt"
	"html/template"
	"io"
)

// The report's charts are SVG drawn through html/template, so every name
// that reaches one (a thread, an operation, an error message in a
// tooltip) is escaped by the template's contextual rules rather than by
// remembering to call an escaper at each Sprintf. Geometry is computed in
// Go (chart, shares) into an svgDoc; the template only places it. Its
// output stays well-formed XML: elements are closed in the template and
// the escaper emits numeric character references, which XML accepts.

// svgDoc is one chart, its elements drawn in the order of the fields:
// rules and bars under the data lines, labels on top.
type svgDoc struct {
	W, H    int
	Title   string
	Lines   []svgLine
	Rects   []svgRect
	Paths   []svgPath
	Circles []svgCircle
	Texts   []svgText
}

type svgLine struct {
	X1, X2, Y1, Y2 float64
	Stroke         string
	Width          float64 // 0: 1
	Dashed         bool
}

type svgRect struct {
	X, Y, W, H float64
	Fill       string
	Title      string // tooltip; "" for none
}

type svgPath struct {
	D      string
	Stroke string
	Dashed bool
}

type svgCircle struct {
	X, Y float64
	Fill string
}

type svgText struct {
	X, Y   float64
	Size   int
	Anchor string // start (""), middle, end
	Bold   bool
	Rotate bool // -90° about (X, Y), for a y-axis label
	Text   string
}

var svgTemplate = template.Must(template.New("svg").Funcs(template.FuncMap{
	"f": func(v float64) string { return fmt.Sprintf("%.1f", v) },
}).Parse(`<svg xmlns="http://www.w3.org/2000/svg" width="{{.W}}" height="{{.H}}" viewBox="0 0 {{.W}} {{.H}}" role="img"><title>{{.Title}}</title>
{{range .Lines}}<line x1="{{f .X1}}" x2="{{f .X2}}" y1="{{f .Y1}}" y2="{{f .Y2}}" stroke="{{.Stroke}}"{{if .Width}} stroke-width="{{f .Width}}"{{end}}{{if .Dashed}} stroke-dasharray="5 4"{{end}}/>
{{end}}{{range .Rects}}<rect x="{{f .X}}" y="{{f .Y}}" width="{{f .W}}" height="{{f .H}}" fill="{{.Fill}}">{{with .Title}}<title>{{.}}</title>{{end}}</rect>
{{end}}{{range .Paths}}<path d="{{.D}}" fill="none" stroke="{{.Stroke}}" stroke-width="1.6"{{if .Dashed}} stroke-dasharray="5 4"{{end}}/>
{{end}}{{range .Circles}}<circle cx="{{f .X}}" cy="{{f .Y}}" r="3.5" fill="{{.Fill}}"/>
{{end}}{{range .Texts}}<text x="{{f .X}}" y="{{f .Y}}" font-size="{{.Size}}"{{with .Anchor}} text-anchor="{{.}}"{{end}}{{if .Bold}} font-weight="bold"{{end}}{{if .Rotate}} transform="rotate(-90 {{f .X}} {{f .Y}})"{{end}}>{{.Text}}</text>
{{end}}</svg>
`))

func (d *svgDoc) render(w io.Writer) error { return svgTemplate.Execute(w, d) }
