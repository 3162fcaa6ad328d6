package flamegraph

import (
	"bytes"
	_ "embed"
	"fmt"
	"html"
	"io"
	"strings"
)

var (
	//go:embed assets/page.html
	pageTemplate string
	//go:embed assets/flamegraph.css
	pageCSS string
	//go:embed assets/flamegraph.js
	pageJS string
)

// Options are the page's title and unit, and how small a frame may be to be drawn.
type Options struct {
	Title string
	// Unit names the values (samples, nanoseconds, bytes...).
	Unit string
	// MinFraction leaves out frames whose share of the total is below it (their time stays in
	// their caller): at 0.0001 a frame would be a tenth of a pixel wide on a 1000-pixel page.
	// Zero means 0.0001; a negative value keeps every frame.
	MinFraction float64
}

// Render writes the tree as one HTML page with everything it needs inside: the tree as JSON,
// the script and the style sheet. The page fetches nothing.
func Render(w io.Writer, t *Tree, o Options) error {
	if o.Title == "" {
		o.Title = "Flame graph"
	}
	if o.Unit == "" {
		o.Unit = "samples"
	}
	frac := o.MinFraction
	if frac == 0 {
		frac = 0.0001
	}
	minValue := int64(1)
	if frac > 0 {
		minValue = max(1, int64(float64(t.Total())*frac))
	}
	data, err := t.data(o.Title, o.Unit, minValue).marshal()
	if err != nil {
		return err
	}
	// The data goes in last, between the two halves of the page around its placeholder, so
	// nothing inserted (a title that spells a placeholder) is read as a placeholder; the JSON
	// escapes '<', '>' and '&', so it cannot close its script element.
	before, after, ok := strings.Cut(pageTemplate, "{{DATA}}")
	if !ok {
		return fmt.Errorf("page template without its data placeholder")
	}
	fill := strings.NewReplacer("{{CSS}}", pageCSS, "{{JS}}", pageJS, "{{TITLE}}", html.EscapeString(o.Title))
	var b bytes.Buffer
	b.WriteString(fill.Replace(before))
	b.Write(data)
	b.WriteString(fill.Replace(after))
	if _, err := w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("write the flame graph: %w", err)
	}
	return nil
}
