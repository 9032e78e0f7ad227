// Package token escapes free text into a single key token and back.
//
// A key of the mesh is tokens joined by ".". Names of nodes, modules and
// provisions are already tokens; any other text that must stand in a token
// (a collection name, a contributor) is written with every byte outside
// [A-Za-z0-9_-] as "=" followed by two upper-case hex digits. So
// "shell:zsh:normal" is the token "shell=3Azsh=3Anormal" and "=" is "=3D".
// Decoding is exact: a token that does not decode is out of shape.
package token

import (
	"errors"
	"strconv"
	"strings"
)

// ErrBadToken is wrapped by the [*Error] that [Unescape] returns for a token
// that is not the exact escaping of any text.
var ErrBadToken = errors.New("token: not a valid escaped token")

// Error says which token did not decode, and where.
type Error struct {
	Token  string // the token as given
	Offset int    // byte offset of the first offending byte
	Why    string // what is wrong there
}

func (e *Error) Error() string {
	return "token: " + strconv.Quote(e.Token) + ": " + e.Why + " at byte " + strconv.Itoa(e.Offset)
}

// Unwrap returns [ErrBadToken].
func (e *Error) Unwrap() error { return ErrBadToken }

const upperhex = "0123456789ABCDEF"

func plain(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// Escape returns s as one key token: every byte outside [A-Za-z0-9_-] is
// written as "=HH" with upper-case hex digits. The empty text is the empty
// token, which is not a valid key token; callers that put it in a key must
// refuse it.
func Escape(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if !plain(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if plain(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('=')
		b.WriteByte(upperhex[c>>4])
		b.WriteByte(upperhex[c&15])
	}
	return b.String()
}

// Unescape returns the text that t escapes. It returns an [*Error] wrapping
// [ErrBadToken] when t holds a byte outside [A-Za-z0-9_=-], when "=" is not
// followed by two upper-case hex digits, or when an escape stands for a byte
// that [Escape] writes as itself (so that Escape(Unescape(t)) == t always).
func Unescape(t string) (string, error) {
	if strings.IndexByte(t, '=') < 0 {
		for i := 0; i < len(t); i++ {
			if !plain(t[i]) {
				return "", &Error{Token: t, Offset: i, Why: "byte " + strconv.Quote(t[i:i+1]) + " must be escaped"}
			}
		}
		return t, nil
	}
	b := make([]byte, 0, len(t))
	for i := 0; i < len(t); i++ {
		c := t[i]
		if plain(c) {
			b = append(b, c)
			continue
		}
		if c != '=' {
			return "", &Error{Token: t, Offset: i, Why: "byte " + strconv.Quote(t[i:i+1]) + " must be escaped"}
		}
		if i+2 >= len(t) {
			return "", &Error{Token: t, Offset: i, Why: "\"=\" needs two hex digits"}
		}
		hi, ok1 := unhex(t[i+1])
		lo, ok2 := unhex(t[i+2])
		if !ok1 || !ok2 {
			return "", &Error{Token: t, Offset: i, Why: "\"=\" needs two upper-case hex digits"}
		}
		v := hi<<4 | lo
		if plain(v) {
			return "", &Error{Token: t, Offset: i, Why: "byte " + strconv.Quote(string(rune(v))) + " must not be escaped"}
		}
		b = append(b, v)
		i += 2
	}
	return string(b), nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
