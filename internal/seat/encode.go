package seat

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// The seat encodes every provision and refusal it writes (32 407 provisions
// at the cold start of 1000 nodes): encodeProvision and encodeRefusal write
// the bytes of json.Marshal without reflection. TestEncodeIsMarshal fills
// every field of mesh.Provision and mesh.Refusal, a field added later
// included, and compares the two; FuzzEncodeProvision compares them on any
// strings and times.

// encodeProvision returns the JSON of p, byte for byte what json.Marshal
// gives (its error included, for a time JSON cannot write).
func encodeProvision(p *mesh.Provision) ([]byte, error) {
	// Room for the fields' names, the times and the strings as they are:
	// one allocation unless a string needs escaping.
	n := 200 + len(p.Provision) + len(p.Local) + len(p.Consumer.Module) + len(p.Consumer.Node) +
		len(p.Provider.Module) + len(p.Provider.Node) + len(p.State) + len(p.Why) + len(p.Ask)
	for _, d := range p.DependsOn {
		n += len(d) + 3
	}
	if p.Reference != nil {
		n += 64 + len(p.Reference.ID)
	}
	if w := p.Warrant; w != nil {
		n += 128 + len(w.Ask) + len(w.Option) + len(w.By.Who) + len(w.By.Kind) + len(w.By.Identity) + len(w.By.JWT) + len(w.By.Sig)
	}
	b := make([]byte, 0, n)
	b = append(b, `{"provision":`...)
	b = appendString(b, p.Provision)
	b = append(b, `,"local":`...)
	b = appendString(b, p.Local)
	b = append(b, `,"consumer":`...)
	b = appendRef(b, p.Consumer)
	b = append(b, `,"provider":`...)
	b = appendRef(b, p.Provider)
	b = append(b, `,"state":`...)
	b = appendString(b, string(p.State))
	if p.Why != "" {
		b = append(b, `,"why":`...)
		b = appendString(b, p.Why)
	}
	if len(p.DependsOn) > 0 {
		b = append(b, `,"depends-on":[`...)
		for i, d := range p.DependsOn {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, d)
		}
		b = append(b, ']')
	}
	if r := p.Reference; r != nil {
		b = append(b, `,"reference":{"id":`...)
		b = appendString(b, r.ID)
		b = append(b, `,"generation":`...)
		b = strconv.AppendInt(b, r.Generation, 10)
		b = append(b, '}')
	}
	if p.Ask != "" {
		b = append(b, `,"ask":`...)
		b = appendString(b, p.Ask)
	}
	ok := true
	if w := p.Warrant; w != nil {
		b = append(b, `,"warrant":{"ask":`...)
		b = appendString(b, w.Ask)
		b = append(b, `,"option":`...)
		b = appendString(b, w.Option)
		b = append(b, `,"by":{"who":`...)
		b = appendString(b, w.By.Who)
		b = append(b, `,"kind":`...)
		b = appendString(b, w.By.Kind)
		b = append(b, `,"identity":`...)
		b = appendString(b, w.By.Identity)
		if w.By.JWT != "" { // the seat keeps no proof in a key's warrant; written as Marshal would
			b = append(b, `,"jwt":`...)
			b = appendString(b, w.By.JWT)
		}
		if w.By.Sig != "" {
			b = append(b, `,"sig":`...)
			b = appendString(b, w.By.Sig)
		}
		b = append(b, `},"at":`...)
		b, ok = appendTime(b, w.At)
		b = append(b, '}')
	}
	b = append(b, `,"at":`...)
	b, okAt := appendTime(b, p.At)
	if !ok || !okAt {
		return json.Marshal(p) // its error says which time
	}
	return append(b, '}'), nil
}

// encodeRefusal returns the JSON of r, byte for byte what json.Marshal
// gives (its error included, for a time JSON cannot write).
func encodeRefusal(r *mesh.Refusal) ([]byte, error) {
	b := make([]byte, 0, 64+len(r.Why))
	b = append(b, `{"node":`...)
	b = appendString(b, r.Node)
	b = append(b, `,"module":`...)
	b = appendString(b, r.Module)
	b = append(b, `,"why":`...)
	b = appendString(b, r.Why)
	b = append(b, `,"since":`...)
	b, ok := appendTime(b, r.Since)
	if !ok {
		return json.Marshal(r)
	}
	return append(b, '}'), nil
}

func appendRef(b []byte, r mesh.Ref) []byte {
	b = append(b, `{"module":`...)
	b = appendString(b, r.Module)
	b = append(b, `,"node":`...)
	b = appendString(b, r.Node)
	return append(b, '}')
}

// appendTime appends t quoted in RFC 3339 with nanoseconds, as
// time.Time.MarshalJSON writes it, and reports whether JSON can write it:
// not a year outside 0 to 9999, nor a zone whose offset is a day or more
// (the seconds of an offset are left out, as MarshalJSON leaves them).
func appendTime(b []byte, t time.Time) ([]byte, bool) {
	start := len(b)
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	s := b[start+1:]
	if len(s) < len("2006-01-02T15:04:05Z") || s[4] != '-' {
		return b[:start], false
	}
	if s[len(s)-1] != 'Z' {
		// ±hh:mm at the end; an offset of 100 hours or more has a
		// digit where the sign would be.
		c := s[len(s)-len("Z07:00")]
		hh := 10*int(s[len(s)-5]-'0') + int(s[len(s)-4]-'0')
		if '0' <= c && c <= '9' || hh >= 24 {
			return b[:start], false
		}
	}
	return append(b, '"'), true
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string, escaped as json.Marshal escapes
// it: '"' and '\\' with a backslash, control bytes as \b \f \n \r \t or
// \u00XX, '<' '>' '&' as \u003c \u003e \u0026, the line and paragraph
// separators U+2028 and U+2029 as \u2028 and \u2029, and each byte that is
// not valid UTF-8 as \ufffd.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	plain := 0 // s[plain:i] is yet to be appended as it is
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[plain:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			plain = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[plain:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[plain:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		plain = i
	}
	b = append(b, s[plain:]...)
	return append(b, '"')
}
