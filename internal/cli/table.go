package cli

import (
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"unicode/utf8"
)

// tableWidth is the width, in columns, that tables fit unless -o wide is
// given.
const tableWidth = 120

// minColumn is the narrowest a column is cut to when a table does not fit.
const minColumn = 10

// writeTable writes header and rows as columns two spaces apart. Unless
// wide, the widest columns are cut (their cells end in "…") until a line
// fits tableWidth; a table that cannot fit with every column at
// minColumn is cut that far.
func writeTable(w io.Writer, header []string, rows [][]string, wide bool) error {
	if !wide {
		rows = fitRows(header, rows, tableWidth)
		header = fitRows(header, [][]string{header}, tableWidth)[0]
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	io.WriteString(tw, strings.Join(header, "\t")+"\n")
	for _, r := range rows {
		io.WriteString(tw, strings.Join(r, "\t")+"\n")
	}
	return tw.Flush()
}

// fitRows returns rows with cells cut so that the table of header and rows
// fits width (two spaces between columns).
func fitRows(header []string, rows [][]string, width int) [][]string {
	widths := make([]int, len(header))
	measure := func(r []string) {
		for i, c := range r {
			if i < len(widths) {
				widths[i] = max(widths[i], utf8.RuneCountInString(c))
			}
		}
	}
	measure(header)
	for _, r := range rows {
		measure(r)
	}
	total := func() int {
		t := 2 * (len(widths) - 1)
		for _, n := range widths {
			t += n
		}
		return t
	}
	limit := append([]int(nil), widths...)
	for total() > width {
		widest := 0
		for i := range widths {
			if widths[i] > widths[widest] {
				widest = i
			}
		}
		if widths[widest] <= minColumn {
			break
		}
		widths[widest]--
	}
	if slices.Equal(widths, limit) {
		return rows
	}
	out := make([][]string, len(rows))
	for i, r := range rows {
		nr := make([]string, len(r))
		for j, c := range r {
			nr[j] = c
			if j < len(widths) && utf8.RuneCountInString(c) > widths[j] {
				nr[j] = string([]rune(c)[:widths[j]-1]) + "…"
			}
		}
		out[i] = nr
	}
	return out
}
