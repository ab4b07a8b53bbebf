package main

import (
	"fmt"
	"html"
	"math"
	"strings"
	"unicode/utf8"
)

// bar is one bar of a chart: a value and, optionally, the range it varied
// over between runs (drawn as a whisker when Hi > Lo). Series picks the
// colour, so that bars of one kind (ours, a baseline, a peer) match.
type bar struct {
	Label   string
	Value   float64
	Lo, Hi  float64
	Series  int
	Caption string // printed after the bar; default: the value and Unit
}

// barChart is a horizontal bar chart, one bar per row, written as a small
// standalone SVG.
type barChart struct {
	Title string
	Unit  string // printed after values and on the axis
	Log   bool   // logarithmic value axis (for figures that span decades)
	Dur   bool   // values are nanoseconds: label the axis in ns, µs, ms, s
	Bars  []bar
	Note  string // a line under the chart
}

// Series colours: ours, baselines, peers, and spares.
var seriesColors = []string{"#2b6cb0", "#718096", "#dd6b20", "#38a169", "#805ad5", "#d53f8c"}

const (
	svgPlotW   = 400 // the bars' area
	svgRightW  = 120 // room for the value after the longest bar
	svgRowH    = 22
	svgTop     = 34
	svgBottomH = 40
)

// svg renders c. Bars with a value that is not positive (or NaN) are shown
// as "n/a" with no bar. The output depends only on c.
func (c barChart) svg() string {
	plotW := float64(svgPlotW)
	labelW := c.labelWidth()
	svgWidth := labelW + svgPlotW + svgRightW
	lo, hi := c.domain()
	pos := func(v float64) float64 { // pixels from the plot's left edge
		if !(v > 0) {
			return 0
		}
		var f float64
		if c.Log {
			f = (math.Log10(v) - math.Log10(lo)) / (math.Log10(hi) - math.Log10(lo))
		} else {
			f = v / hi
		}
		return math.Round(min(max(f, 0), 1)*plotW*10) / 10
	}
	height := svgTop + len(c.Bars)*svgRowH + svgBottomH
	if c.Note != "" {
		height += 16
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		svgWidth, height, svgWidth, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", svgWidth, height)
	fmt.Fprintf(&b, `<text x="10" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", esc(c.Title))
	x0 := float64(labelW)
	axisY := svgTop + len(c.Bars)*svgRowH
	// Grid lines and tick labels.
	for _, t := range c.ticks(lo, hi) {
		x := x0 + pos(t)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e2e8f0"/>`+"\n", x, svgTop-4, x, axisY)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#4a5568">%s</text>`+"\n", x, axisY+14, esc(c.tickText(t)))
	}
	for i, br := range c.Bars {
		y := svgTop + i*svgRowH
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", labelW-8, y+15, esc(br.Label))
		caption := br.Caption
		if !(br.Value > 0) {
			if caption == "" {
				caption = "n/a"
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#a0aec0">%s</text>`+"\n", x0+4, y+15, esc(caption))
			continue
		}
		w := max(pos(br.Value), 1)
		color := seriesColors[((br.Series%len(seriesColors))+len(seriesColors))%len(seriesColors)]
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", x0, y+4, w, svgRowH-8, color)
		end := x0 + w
		if br.Hi > br.Lo && br.Lo > 0 {
			l, h := x0+pos(br.Lo), x0+pos(br.Hi)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#1a202c"/>`+"\n", l, y+11, h, y+11)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#1a202c"/>`+"\n", l, y+7, l, y+15)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#1a202c"/>`+"\n", h, y+7, h, y+15)
			end = max(end, h)
		}
		if caption == "" {
			caption = sig3(br.Value) + " " + c.Unit
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#1a202c">%s</text>`+"\n", end+4, y+15, esc(strings.TrimSpace(caption)))
	}
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#4a5568"/>`+"\n", x0, axisY, x0+plotW, axisY)
	axis := c.Unit
	if c.Log {
		axis += " (log scale)"
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#4a5568">%s</text>`+"\n", x0+plotW/2, axisY+30, esc(strings.TrimSpace(axis)))
	if c.Note != "" {
		fmt.Fprintf(&b, `<text x="10" y="%d" fill="#4a5568">%s</text>`+"\n", axisY+48, esc(c.Note))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// labelWidth is the width of the label column: enough for the longest
// label at about 6.6 px per character of 12 px sans-serif.
func (c barChart) labelWidth() int {
	n := 0
	for _, b := range c.Bars {
		n = max(n, utf8.RuneCountInString(b.Label))
	}
	return max(120, int(float64(n)*6.6)+16)
}

// domain returns the value range of the axis: [0, max] rounded up to a
// nice number, or whole decades around the positive values for Log.
func (c barChart) domain() (lo, hi float64) {
	mx, mn := 0.0, math.Inf(1)
	for _, b := range c.Bars {
		for _, v := range []float64{b.Value, b.Hi} {
			if v > 0 && !math.IsInf(v, 0) {
				mx = max(mx, v)
				mn = min(mn, v)
			}
		}
		if b.Lo > 0 {
			mn = min(mn, b.Lo)
		}
	}
	if mx == 0 {
		return 1, 10
	}
	if c.Log {
		lo = math.Pow(10, math.Floor(math.Log10(mn)))
		hi = math.Pow(10, math.Ceil(math.Log10(mx)))
		if hi <= lo {
			hi = lo * 10
		}
		return lo, hi
	}
	return 0, niceCeil(mx)
}

// ticks returns the axis ticks: each decade for Log, else about five evenly
// spaced nice values.
func (c barChart) ticks(lo, hi float64) []float64 {
	var out []float64
	if c.Log {
		for v := lo; v <= hi*1.0001; v *= 10 {
			out = append(out, v)
		}
		return out
	}
	step := niceCeil(hi / 5)
	for v := 0.0; v <= hi*1.0001; v += step {
		out = append(out, v)
	}
	return out
}

func (c barChart) tickText(v float64) string {
	if !c.Dur {
		return tickLabel(v)
	}
	if v == 0 {
		return "0"
	}
	div := durDivisor(v)
	unit := map[float64]string{1: " ns", 1e3: " µs", 1e6: " ms", 1e9: " s"}[div]
	return trimZeros(v/div) + unit
}

// niceCeil rounds x up to 1, 2, 2.5 or 5 times a power of ten.
func niceCeil(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= x*(1-1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// tickLabel prints an axis value compactly: 0, 250, 1.5k, 10M, 0.01.
func tickLabel(v float64) string {
	switch abs := math.Abs(v); {
	case abs >= 1e9:
		return trimZeros(v/1e9) + "G"
	case abs >= 1e6:
		return trimZeros(v/1e6) + "M"
	case abs >= 1e3:
		return trimZeros(v/1e3) + "k"
	default:
		return trimZeros(v)
	}
}

func trimZeros(v float64) string {
	s := fmt.Sprintf("%.3f", v)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

func esc(s string) string { return html.EscapeString(s) }
