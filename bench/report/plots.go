package main

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// series is one tool (or setting) across the categories of a plot; NaN is a value not measured.
type series struct {
	name   string
	values []float64
}

const (
	plotWidth  = 6.5 * vg.Inch
	plotHeight = 3.4 * vg.Inch
)

// savePlot writes p as SVG: gonum/plot picks the format from the file name.
func savePlot(p *plot.Plot, dir, name string) error {
	path := filepath.Join(dir, name)
	if err := p.Save(plotWidth, plotHeight, path); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

// Sans-serif text reads better on a web page than gonum/plot's default serif.
func init() {
	sans := font.Font{Typeface: "Liberation", Variant: "Sans"}
	plot.DefaultFont = sans
	plotter.DefaultFont = sans
}

func newPlot(title, ylabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Legend.Top = true
	p.Legend.Left = true
	p.Y.Tick.Marker = niceTicks{}
	return p
}

// barPlot is a grouped bar chart: one group per category, one bar per series, from zero.
func barPlot(title, ylabel string, cats []string, ss []series) (*plot.Plot, error) {
	p := newPlot(title, ylabel)
	w := vg.Points(float64(min(40, 320/max(1, len(cats)*len(ss)))))
	top := 0.0
	for i, s := range ss {
		vals := make(plotter.Values, len(s.values))
		for j, v := range s.values {
			if math.IsNaN(v) {
				v = 0
			}
			vals[j] = v
			top = max(top, v)
		}
		b, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", title, s.name, err)
		}
		b.Color = plotutil.Color(i)
		b.LineStyle.Width = 0
		b.Offset = w * vg.Length(float64(i)-float64(len(ss)-1)/2)
		p.Add(b)
		p.Legend.Add(s.name, b)
	}
	p.NominalX(cats...)
	p.X.Min, p.X.Max = -0.5, float64(len(cats))-0.5 // whole groups at both ends
	p.Y.Min = 0
	p.Y.Max = top * 1.5 // room for the legend
	p.Add(plotter.NewGrid())
	return p, nil
}

// glyphs are filled shapes, told apart without colour.
var glyphs = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.BoxGlyph{}, draw.PyramidGlyph{}, draw.CrossGlyph{}}

// logPlot shows values on a log scale, one marker per category and series, with a dashed line
// at 1 (parity) when unity is set: a bar from zero means nothing on a log axis, and the ratios
// and latencies shown span orders of magnitude.
func logPlot(title, ylabel string, cats []string, ss []series, unity bool) (*plot.Plot, error) {
	p := newPlot(title, ylabel)
	p.Y.Scale = plot.LogScale{}
	lo, hi := math.Inf(1), math.Inf(-1)
	if unity {
		lo, hi = 1, 1
	}
	for i, s := range ss {
		var pts plotter.XYs
		for j, v := range s.values {
			if math.IsNaN(v) || v <= 0 {
				continue
			}
			off := 0.12 * (float64(i) - float64(len(ss)-1)/2)
			pts = append(pts, plotter.XY{X: float64(j) + off, Y: v})
			lo, hi = min(lo, v), max(hi, v)
		}
		if len(pts) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", title, s.name, err)
		}
		sc.Color = plotutil.Color(i)
		sc.Shape = glyphs[i%len(glyphs)]
		sc.Radius = vg.Points(4.5)
		p.Add(sc)
		p.Legend.Add(s.name, sc)
	}
	if math.IsInf(lo, 0) {
		return nil, fmt.Errorf("%s: no value to plot", title)
	}
	if unity {
		one, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: 1}, {X: float64(len(cats)) - 0.5, Y: 1}})
		if err != nil {
			return nil, err
		}
		one.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		one.Color = color.Gray{Y: 96}
		p.Add(one)
	}
	p.NominalX(cats...)
	p.X.Min, p.X.Max = -0.5, float64(len(cats))-0.5
	p.Y.Min, p.Y.Max = lo/1.5, hi*4 // room above for the legend
	p.Add(plotter.NewGrid())
	return p, nil
}

// niceTicks labels 1, 2 and 5 times powers of ten, as many as fit: plot.LogTicks labels only
// the powers of ten, too few for ratios between 0.5 and 20.
type niceTicks struct{}

func (niceTicks) Ticks(lo, hi float64) []plot.Tick {
	if lo <= 0 {
		return plot.DefaultTicks{}.Ticks(lo, hi)
	}
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v >= lo && v <= hi {
				ticks = append(ticks, plot.Tick{Value: v, Label: trimFloat(v)})
			}
		}
	}
	if len(ticks) < 2 {
		return plot.DefaultTicks{}.Ticks(lo, hi)
	}
	return ticks
}

func trimFloat(v float64) string { return fmt.Sprintf("%g", v) }
