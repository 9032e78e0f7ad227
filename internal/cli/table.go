package cli

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"golang.org/x/term"
)

// defaultWidth is the width, in columns, that tables fit when $COLUMNS
// does not say one and the output is not a terminal.
const defaultWidth = 120

// tableWidth returns the width a table written to w fits: $COLUMNS when
// it is a number of at least 20, else the terminal's width when w is one,
// else defaultWidth.
func tableWidth(w io.Writer) int {
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n >= 20 {
		return n
	}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		if n, _, err := term.GetSize(int(f.Fd())); err == nil && n >= 20 {
			return n
		}
	}
	return defaultWidth
}

// writesTerminal reports whether w is a terminal.
func writesTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isTerminal(f)
}

// wholeColumns are the columns a table never cuts, by their header: the
// things an operator copies (a key, an ask id, the names a key is made of,
// a provider: its module, or module@node).
var wholeColumns = map[string]bool{"KEY": true, "ODD KEY": true, "ASK": true, "NODE": true, "MODULE": true, "PROVIDER": true, "OPEN ASKS": true}

// minColumn is the narrowest a column is cut to when a table does not fit.
const minColumn = 10

// writeTable writes header and rows as columns two spaces apart. Unless
// wide, the widest columns are cut (their cells end in "…") until a line
// fits [tableWidth]; a table that cannot fit with every column at
// minColumn is cut that far. A column of [wholeColumns] is never cut: a
// table with a long key is wider than the terminal rather than cut it.
//
// width, when given, is the width to fit instead of [tableWidth]'s (for a
// table written to a buffer first).
func writeTable(w io.Writer, header []string, rows [][]string, wide bool, width ...int) error {
	// Escaped first, so that the widths are those printed.
	header, rows = escapeRows(header), escapeAll(rows)
	if !wide {
		fit := tableWidth(w)
		if len(width) > 0 {
			fit = width[0]
		}
		width := fit
		rows = fitRows(header, rows, width)
		header = fitRows(header, [][]string{header}, width)[0]
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
		widest := -1
		for i := range widths {
			if !wholeColumns[header[i]] && (widest < 0 || widths[i] > widths[widest]) {
				widest = i
			}
		}
		if widest < 0 || widths[widest] <= minColumn {
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

// escapeRows returns the cells of r escaped (escapeControl).
func escapeRows(r []string) []string {
	out := make([]string, len(r))
	for i, c := range r {
		out[i] = escapeControl(c)
	}
	return out
}

func escapeAll(rows [][]string) [][]string {
	out := make([][]string, len(rows))
	for i, r := range rows {
		out[i] = escapeRows(r)
	}
	return out
}

// escapeControl returns s with every control character (C0 but none
// kept, DEL, C1), every byte that is not UTF-8 and every bidirectional
// override written as an escape (\x1b, \u202e), so that a value a provider
// wrote (an entry's why) cannot move the cursor, recolour or rewrite the
// operator's terminal, nor break a table's lines. Other text is unchanged.
func escapeControl(s string) string {
	clean := true
	for _, r := range s {
		if needsEscape(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x80 && needsEscape(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case needsEscape(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// needsEscape reports whether r is written as an escape by escapeControl.
func needsEscape(r rune) bool {
	return r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f || r == utf8.RuneError ||
		r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069
}
