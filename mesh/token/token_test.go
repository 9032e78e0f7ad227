package token

import (
	"errors"
	"testing"
)

var cases = []struct {
	name, text, token string
}{
	{"plain", "gitea", "gitea"},
	{"collection", "shell:zsh:normal", "shell=3Azsh=3Anormal"},
	{"equals", "=", "=3D"},
	{"dot", "a.b", "a=2Eb"},
	{"space and slash", "a b/c", "a=20b=2Fc"},
	{"utf-8", "é", "=C3=A9"},
	{"empty", "", ""},
}

func TestEscape(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Escape(c.text); got != c.token {
				t.Errorf("Escape(%q) = %q; want %q", c.text, got, c.token)
			}
			got, err := Unescape(c.token)
			if err != nil || got != c.text {
				t.Errorf("Unescape(%q) = %q, %v; want %q", c.token, got, err, c.text)
			}
		})
	}
}

func TestUnescapeBad(t *testing.T) {
	for _, tok := range []string{"a.b", "a:b", "=3", "=", "=3a", "=41", "=G0", "x=2"} {
		_, err := Unescape(tok)
		if !errors.Is(err, ErrBadToken) {
			t.Errorf("Unescape(%q) error = %v; want ErrBadToken", tok, err)
		}
		var te *Error
		if !errors.As(err, &te) || te.Token != tok {
			t.Errorf("Unescape(%q) error %v is not a *Error naming the token", tok, err)
		}
	}
}

func FuzzRoundTrip(f *testing.F) {
	for _, c := range cases {
		f.Add(c.text)
		f.Add(c.token)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, err := Unescape(Escape(s)); err != nil || got != s {
			t.Fatalf("Unescape(Escape(%q)) = %q, %v", s, got, err)
		}
		if text, err := Unescape(s); err == nil {
			if again := Escape(text); again != s {
				t.Fatalf("Escape(Unescape(%q)) = %q", s, again)
			}
		}
	})
}
