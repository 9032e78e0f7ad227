package meshfile

import (
	"fmt"
	"strings"
)

// Error is one problem of a mesh file: the line it is on (1-based; 0 when
// the problem belongs to no line, such as an empty file) and what is wrong.
type Error struct {
	Line int
	Msg  string
}

// String returns "LINE: message", or the message alone when Line is 0.
func (e Error) String() string {
	if e.Line == 0 {
		return e.Msg
	}
	return fmt.Sprintf("%d: %s", e.Line, e.Msg)
}

// Errors is every problem [Parse] found in one mesh file, sorted by line.
// A file with any is refused whole: nothing of it is written.
type Errors struct {
	File string  // the file's name, as given to Parse
	List []Error // at least one, sorted by line
}

// Error returns one line per problem, each "FILE:LINE: message".
func (e *Errors) Error() string {
	var b strings.Builder
	for i, x := range e.List {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(Located(e.File, x))
	}
	return b.String()
}

// Count returns how many problems e holds, worded for a message: "1 error"
// or "N errors".
func (e *Errors) Count() string {
	if len(e.List) == 1 {
		return "1 error"
	}
	return fmt.Sprintf("%d errors", len(e.List))
}

// Located returns "FILE:LINE: message" for x, or "FILE: message" when x has
// no line.
func Located(file string, x Error) string {
	if x.Line == 0 {
		return file + ": " + x.Msg
	}
	return fmt.Sprintf("%s:%d: %s", file, x.Line, x.Msg)
}
