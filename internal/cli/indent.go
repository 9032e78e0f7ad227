package cli

import "encoding/json"

// appendIndented appends v, a valid JSON value, as json.Encoder with
// SetIndent(prefix, indent) writes a json.RawMessage holding it (less the
// final newline): space between tokens dropped, an element of an object or
// array on a line of its own, "<", ">", "&", U+2028 and U+2029 in strings
// escaped as \u003c, \u003e, \u0026, \u2028 and \u2029, everything else
// copied. It is one pass over v where the encoder makes three (compact,
// validate, indent); v that is not valid JSON gives no error but output
// the encoder would not write, so check it first (json.Valid).
func appendIndented(dst, v []byte, prefix, indent string) []byte {
	const hex = "0123456789abcdef"
	depth := 0
	open := false // an object or array was opened, its first element not yet written
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		if open && c != '}' && c != ']' {
			open = false
			depth++
			dst = appendNewline(dst, prefix, indent, depth)
		}
		switch c {
		case '"':
			dst = append(dst, '"')
			start := i + 1
		str:
			for i++; i < len(v); i++ {
				switch c := v[i]; {
				case c == '\\':
					i++ // the escaped byte goes as it is
				case c == '"':
					break str
				case c == '<' || c == '>' || c == '&':
					dst = append(dst, v[start:i]...)
					dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
					start = i + 1
				case c == 0xE2 && i+2 < len(v) && v[i+1] == 0x80 && v[i+2]&^1 == 0xA8:
					dst = append(dst, v[start:i]...)
					dst = append(dst, '\\', 'u', '2', '0', '2', hex[v[i+2]&0xF])
					i += 2
					start = i + 1
				}
			}
			dst = append(dst, v[start:min(i, len(v))]...)
			dst = append(dst, '"')
		case '{', '[':
			open = true
			dst = append(dst, c)
		case ',':
			dst = append(dst, c)
			dst = appendNewline(dst, prefix, indent, depth)
		case ':':
			dst = append(dst, ':', ' ')
		case '}', ']':
			if open {
				open = false // {} and [] on one line
			} else {
				depth--
				dst = appendNewline(dst, prefix, indent, depth)
			}
			dst = append(dst, c)
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

func appendNewline(dst []byte, prefix, indent string, depth int) []byte {
	dst = append(dst, '\n')
	dst = append(dst, prefix...)
	for range depth {
		dst = append(dst, indent...)
	}
	return dst
}

// appendQuoted appends s as a JSON string, as json.Marshal writes it
// (HTML escaping included): at once when s holds only printable ASCII
// that needs no escape, as a bucket's keys do.
func appendQuoted(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(dst, q...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
