package main

import (
	"encoding/json"
	"fmt"
	"image/color"
	"os"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// chart draws two panels into a PNG at path: commit → visible latency
// (p50, p99, max) against the offered rate, with the 1 s target, and the
// initial loads' rows/s as a fraction of the engine's pull, with the 0.8
// target.
func (r *report) chart(path string) error {
	latency, err := r.latencyPlot()
	if err != nil {
		return err
	}
	ratios, err := r.ratioPlot()
	if err != nil {
		return err
	}
	const w, h = 12 * vg.Inch, 4.5 * vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Inch / 4, PadTop: vg.Inch / 8, PadBottom: vg.Inch / 8, PadLeft: vg.Inch / 8, PadRight: vg.Inch / 8}
	canvases := plot.Align([][]*plot.Plot{{latency, ratios}}, tiles, dc)
	latency.Draw(canvases[0][0])
	ratios.Draw(canvases[0][1])
	return savePNG(img, path)
}

func (r *report) latencyPlot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "steady: commit → visible latency, and the token wait"
	p.X.Label.Text = "offered rows/s"
	p.Y.Label.Text = "seconds (log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	var ticks []plot.Tick
	for _, st := range r.Steady {
		ticks = append(ticks, plot.Tick{Value: float64(st.OfferedRowsPerSecond), Label: fmt.Sprintf("%gk", float64(st.OfferedRowsPerSecond)/1000)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	type serie struct {
		name  string
		value func(stepResult) float64
		color color.Color
	}
	series := []serie{
		{"p50", func(s stepResult) float64 { return s.P50 }, color.RGBA{R: 40, G: 110, B: 200, A: 255}},
		{"p99", func(s stepResult) float64 { return s.P99 }, color.RGBA{R: 220, G: 120, B: 20, A: 255}},
		{"max", func(s stepResult) float64 { return s.Max }, color.RGBA{R: 190, G: 30, B: 40, A: 255}},
	}
	// The token wait, in a report that measured it (older ones did not).
	if slices.ContainsFunc(r.Steady, func(s stepResult) bool { return s.TokenReads > 0 }) {
		series = append(series, serie{"token wait p99", func(s stepResult) float64 { return s.TokenWaitP99 }, color.RGBA{R: 30, G: 140, B: 70, A: 255}})
	}
	maxRate := 1.0
	for _, s := range series {
		pts := make(plotter.XYs, len(r.Steady))
		for i, st := range r.Steady {
			pts[i] = plotter.XY{X: float64(st.OfferedRowsPerSecond), Y: max(s.value(st), 0.01)} // a log scale has no 0
			maxRate = max(maxRate, pts[i].X)
		}
		if len(pts) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, err
		}
		line.Color, points.Color = s.color, s.color
		p.Add(line, points)
		p.Legend.Add(s.name, line, points)
	}
	if err := addTarget(p, "target p99 ≤ 1 s", 0, maxRate*1.05, 1); err != nil {
		return nil, err
	}
	p.X.Min, p.Y.Min = 0, 0.1
	p.Y.Max = max(p.Y.Max, 2)
	return p, nil
}

func (r *report) ratioPlot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "initial load: rows/s as a fraction of the engine's pull"
	p.Y.Label.Text = "run / ClickHouse postgresql()"
	p.Add(plotter.NewGrid())
	var values plotter.Values
	var names []string
	for _, l := range r.Loads {
		for _, run := range l.Runs {
			if run.Name == runEngine {
				continue
			}
			values = append(values, run.RowsPerSecond/l.engineRowsPerSecond())
			// Three short lines a bar, so that five bars' names fit.
			label := l.Table + "\nwalhouse"
			switch run.Name {
			case runNoLayer2:
				label += ",\nno Layer 2"
			case runMaterialized:
				label = l.Table + "\nMaterialized-\nPostgreSQL"
			}
			names = append(names, fmt.Sprintf("%s\n%.2f×", label, values[len(values)-1]))
		}
	}
	if len(values) > 0 {
		bars, err := plotter.NewBarChart(values, vg.Points(40))
		if err != nil {
			return nil, err
		}
		bars.Color = color.RGBA{R: 40, G: 110, B: 200, A: 255}
		p.Add(bars)
		p.NominalX(names...)
	}
	if err := addTarget(p, "target ≥ 0.8 (walhouse)", -0.5, float64(len(values))-0.5, 0.8); err != nil {
		return nil, err
	}
	p.Legend.Top = true
	p.Y.Min, p.Y.Max = 0, 1
	for _, v := range values {
		p.Y.Max = max(p.Y.Max, v*1.1)
	}
	return p, nil
}

// savePNG writes the canvas to path as PNG.
func savePNG(c *vgimg.Canvas, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// redraw draws the chart of a report written earlier, next to it.
func redraw(jsonPath string) error {
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		return err
	}
	var r report
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("read %s: %w", jsonPath, err)
	}
	return r.chart(strings.TrimSuffix(jsonPath, ".json") + ".png")
}

// addTarget draws the target y as a dashed grey line from x0 to x1, named
// label in the legend.
func addTarget(p *plot.Plot, label string, x0, x1, y float64) error {
	target, err := plotter.NewLine(plotter.XYs{{X: x0, Y: y}, {X: x1, Y: y}})
	if err != nil {
		return err
	}
	target.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	target.Color = color.Gray{Y: 90}
	p.Add(target)
	p.Legend.Add(label, target)
	return nil
}
