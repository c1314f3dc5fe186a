package main

import (
	"fmt"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// plotResults draws busbw against message size, one line per algorithm,
// to an SVG (or PNG/PDF, by the file's extension), in -units.
func plotResults(path string, cfg *benchConfig, rows []result) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("goccl %s, %d ranks over %s (%s)", cfg.op, cfg.ranks, cfg.transport, cfg.dtype)
	p.X.Label.Text = "message size (bytes)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Label.Text = "busbw (" + cfg.units.String() + ")"
	p.Legend.Top = true
	p.Legend.Left = true

	lines := map[string]plotter.XYs{}
	for _, r := range rows {
		if r.Bytes <= 0 {
			continue // a log axis has no zero
		}
		lines[r.Algo] = append(lines[r.Algo], plotter.XY{X: float64(r.Bytes), Y: cfg.units.Convert(r.BusBW * 1e9)})
	}
	if len(lines) == 0 {
		return fmt.Errorf("no sizes above zero to plot")
	}
	names := make([]string, 0, len(lines))
	for name := range lines {
		names = append(names, name)
	}
	sort.Strings(names)
	var args []any
	for _, name := range names {
		args = append(args, name, lines[name])
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return err
	}
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}
