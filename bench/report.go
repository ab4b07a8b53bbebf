package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// section is one scenario's part of the report.
type section struct {
	id        int
	title     string
	intro     string   // what it measures and how
	blocks    []string // Markdown: tables and paragraphs, in order
	charts    []chartFile
	headlines []headline
	err       error
	took      string
}

type chartFile struct {
	file  string // base name, e.g. "1-per-read.svg"
	chart barChart
}

// headline is one figure for the summary at the top of the report.
type headline struct {
	what, value, target string
}

func (s *section) add(md string) { s.blocks = append(s.blocks, md) }

func (s *section) addTable(t table) { s.add(t.markdown()) }

func (s *section) addChart(file string, c barChart) {
	s.charts = append(s.charts, chartFile{file, c})
}

func (s *section) headline(what, value, target string) {
	s.headlines = append(s.headlines, headline{what, value, target})
}

// writeCharts writes every chart of the sections into dir.
func writeCharts(dir string, secs []*section) error {
	for _, s := range secs {
		for _, c := range s.charts {
			if err := os.WriteFile(filepath.Join(dir, c.file), []byte(c.chart.svg()), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// renderReport returns the whole Markdown report. chartDir is where the
// charts are, relative to the Markdown file ("" for none, as on a
// terminal).
func renderReport(m machine, secs []*section, notes []string, chartDir string) string {
	var b strings.Builder
	b.WriteString("# hybridcache scenario benchmarks\n\n")
	b.WriteString("Every figure is measured in this run, on real Redis, next to its baseline; ratios are taken within a run " +
		"and then summarised as the median over runs, with the min–max range in parentheses. " +
		"See README.md for what each scenario does and how to read it.\n\n")
	b.WriteString(m.markdown())
	b.WriteString("\n## Headlines\n\n")
	var hl [][]string
	for _, s := range secs {
		for _, h := range s.headlines {
			hl = append(hl, []string{fmt.Sprintf("%d. %s", s.id, h.what), h.value, h.target})
		}
	}
	b.WriteString(table{Header: []string{"Figure", "Measured", "Target / published"}, Align: []byte{'l', 'r', 'l'}, Rows: hl}.markdown())
	for _, s := range secs {
		fmt.Fprintf(&b, "\n## %d. %s\n\n", s.id, s.title)
		if s.intro != "" {
			b.WriteString(s.intro + "\n\n")
		}
		if s.err != nil {
			fmt.Fprintf(&b, "**Failed:** %v\n\n", s.err)
		}
		for _, blk := range s.blocks {
			b.WriteString(blk)
			if !strings.HasSuffix(blk, "\n") {
				b.WriteString("\n")
			}
			b.WriteString("\n")
		}
		if chartDir != "" {
			for _, c := range s.charts {
				fmt.Fprintf(&b, "![%s](%s)\n\n", c.chart.Title, filepath.ToSlash(filepath.Join(chartDir, c.file)))
			}
		}
		if s.took != "" {
			fmt.Fprintf(&b, "_Scenario took %s._\n", s.took)
		}
	}
	if len(notes) > 0 {
		b.WriteString("\n## Notes from this run\n\n")
		for _, n := range notes {
			b.WriteString("- " + n + "\n")
		}
	}
	return b.String()
}

// chartBars turns rows into bars of their median p50 with the min–max
// whisker.
func chartBars(rs *rows, label func(*row) string) []bar {
	var out []bar
	rs.each(func(r *row) {
		br := bar{Label: label(r), Series: r.series}
		if r.na != "" {
			br.Caption = "n/a"
		} else {
			s := summarize(r.field(p50Of))
			br.Value, br.Lo, br.Hi = s.Median, s.Min, s.Max
			br.Caption = fmtDur(s.Median)
		}
		out = append(out, br)
	})
	return out
}
