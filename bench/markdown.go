package main

import (
	"fmt"
	"math"
	"strings"
	"unicode/utf8"
)

// table is a Markdown table. Align holds one byte per column: 'l', 'r' or
// 'c'; a missing entry means left. Cells are padded so the table also reads
// well as plain text.
type table struct {
	Header []string
	Align  []byte
	Rows   [][]string
}

// markdown renders t. Rows shorter than the header are padded with empty
// cells; a '|' inside a cell is escaped, and a newline becomes a space.
func (t table) markdown() string {
	cols := len(t.Header)
	for _, r := range t.Rows {
		cols = max(cols, len(r))
	}
	if cols == 0 {
		return ""
	}
	cell := func(r []string, i int) string {
		if i >= len(r) {
			return ""
		}
		s := strings.ReplaceAll(r[i], "|", `\|`)
		return strings.ReplaceAll(s, "\n", " ")
	}
	width := make([]int, cols)
	for i := range width {
		width[i] = 3
		width[i] = max(width[i], utf8.RuneCountInString(cell(t.Header, i)))
		for _, r := range t.Rows {
			width[i] = max(width[i], utf8.RuneCountInString(cell(r, i)))
		}
	}
	align := func(i int) byte {
		if i < len(t.Align) {
			return t.Align[i]
		}
		return 'l'
	}
	var b strings.Builder
	line := func(r []string) {
		b.WriteString("|")
		for i := 0; i < cols; i++ {
			s := cell(r, i)
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(s))
			if align(i) == 'r' {
				b.WriteString(" " + pad + s + " |")
			} else {
				b.WriteString(" " + s + pad + " |")
			}
		}
		b.WriteString("\n")
	}
	line(t.Header)
	b.WriteString("|")
	for i := 0; i < cols; i++ {
		dash := strings.Repeat("-", width[i])
		switch align(i) {
		case 'r':
			dash = dash[:len(dash)-1] + ":"
		case 'c':
			dash = ":" + dash[1:len(dash)-1] + ":"
		}
		b.WriteString(" " + dash + " |")
	}
	b.WriteString("\n")
	for _, r := range t.Rows {
		line(r)
	}
	return b.String()
}

// fmtDur formats a duration given in nanoseconds with three significant
// figures and a unit that suits it: "63.2 ns", "57.3 µs", "3.21 ms", "1.50 s".
func fmtDur(ns float64) string {
	if math.IsNaN(ns) {
		return "–"
	}
	abs := math.Abs(ns)
	switch {
	case abs < 1e3:
		return sig3(ns) + " ns"
	case abs < 1e6:
		return sig3(ns/1e3) + " µs"
	case abs < 1e9:
		return sig3(ns/1e6) + " ms"
	default:
		return sig3(ns/1e9) + " s"
	}
}

// sig3 formats x with three significant figures (more for large integers).
func sig3(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	abs := math.Abs(x)
	switch {
	case abs == 0:
		return "0"
	case abs >= 100:
		return fmt.Sprintf("%.0f", x)
	case abs >= 10:
		return fmt.Sprintf("%.1f", x)
	case abs >= 1:
		return fmt.Sprintf("%.2f", x)
	case abs >= 0.01:
		return fmt.Sprintf("%.3f", x)
	default:
		return fmt.Sprintf("%.2g", x)
	}
}

// fmtSpreadDur formats a spread of durations (ns): "57.3 µs (55.0–60.1)",
// the range in the median's unit. A single run prints only the median.
func fmtSpreadDur(s spread) string {
	if s.N == 0 {
		return "–"
	}
	m := fmtDur(s.Median)
	if s.N == 1 {
		return m
	}
	div := durDivisor(s.Median)
	return fmt.Sprintf("%s (%s–%s)", m, sig3(s.Min/div), sig3(s.Max/div))
}

// durDivisor is what fmtDur divides ns by to print it in its unit.
func durDivisor(ns float64) float64 {
	abs := math.Abs(ns)
	switch {
	case abs < 1e3:
		return 1
	case abs < 1e6:
		return 1e3
	case abs < 1e9:
		return 1e6
	default:
		return 1e9
	}
}

// fmtSpread formats a spread of plain numbers with a suffix: "1.25× (1.21–1.30)".
func fmtSpread(s spread, suffix string) string {
	if s.N == 0 {
		return "–"
	}
	if s.N == 1 {
		return sig3(s.Median) + suffix
	}
	return fmt.Sprintf("%s%s (%s–%s)", sig3(s.Median), suffix, sig3(s.Min), sig3(s.Max))
}

// fmtCount formats a count with thin grouping: 1234567 -> "1,234,567".
func fmtCount(n float64) string {
	if math.IsNaN(n) {
		return "–"
	}
	s := fmt.Sprintf("%.0f", math.Abs(n))
	var b strings.Builder
	if n < 0 {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// fmtBytes formats a byte count: "512 B", "40.0 KiB", "6.30 GiB".
func fmtBytes(n float64) string {
	if math.IsNaN(n) {
		return "–"
	}
	abs := math.Abs(n)
	switch {
	case abs < 1024:
		return sig3(n) + " B"
	case abs < 1<<20:
		return sig3(n/1024) + " KiB"
	case abs < 1<<30:
		return sig3(n/(1<<20)) + " MiB"
	default:
		return sig3(n/(1<<30)) + " GiB"
	}
}
