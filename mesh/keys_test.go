package mesh

import (
	"errors"
	"testing"
)

func TestKeysRoundTrip(t *testing.T) {
	for _, k := range []ProvisionKey{
		{Node: "ace", Consumer: "gitea", Provision: "database", Local: "main"},
		{Node: "ace", Consumer: "gitea", Provision: "cache"},
		CredentialKey("control", "redis", "redis", "cache", ""),
		CredentialKey("ace", "gitea", "postgres", "database", "main"),
	} {
		got, err := ParseProvisionKey(k.String())
		if err != nil || got != k {
			t.Errorf("ParseProvisionKey(%q) = %+v, %v; want %+v", k.String(), got, err, k)
		}
	}
	for _, k := range []RefusalKey{{Node: "lab", Module: "web"}, {Node: "lab", Module: "Bad Name:x"}} {
		got, err := ParseRefusalKey(k.String())
		if err != nil || got != k {
			t.Errorf("ParseRefusalKey(%q) = %+v, %v; want %+v", k.String(), got, err, k)
		}
	}
	c := CollectKey{Node: "control", Collection: "shell:zsh:normal", Contributor: "node-tools"}
	if c.String() != "control.shell=3Azsh=3Anormal.node-tools" {
		t.Errorf("CollectKey = %q", c.String())
	}
	if got, err := ParseCollectKey(c.String()); err != nil || got != c {
		t.Errorf("ParseCollectKey(%q) = %+v, %v", c.String(), got, err)
	}
}

func TestKeysOutOfShape(t *testing.T) {
	for _, c := range []struct {
		name  string
		parse func(string) error
		key   string
	}{
		{"provision with two tokens", func(k string) error { _, err := ParseProvisionKey(k); return err }, "ace.gitea"},
		{"provision with a bad node", func(k string) error { _, err := ParseProvisionKey(k); return err }, "Ace.gitea.db"},
		{"want without want", func(k string) error { _, err := ParseWantKey(k); return err }, "need.ace.gitea"},
		{"refusal token that does not decode", func(k string) error { _, err := ParseRefusalKey(k); return err }, "lab.a=ZZ"},
		{"collect token that does not decode", func(k string) error { _, err := ParseCollectKey(k); return err }, "ace.gi=ZZ.x"},
		{"node-module with three tokens", func(k string) error { _, err := ParseNodeModule(k); return err }, "a.b.c"},
	} {
		err := c.parse(c.key)
		var ke *KeyError
		if !errors.Is(err, ErrKeyShape) || !errors.As(err, &ke) || ke.Key != c.key {
			t.Errorf("%s: parse(%q) = %v; want a *KeyError wrapping ErrKeyShape", c.name, c.key, err)
		}
	}
}

// The Append forms give the bytes of String, after what the buffer held.
func TestKeysAppendTo(t *testing.T) {
	prefix := []byte("x:")
	for _, k := range []ProvisionKey{
		{Node: "ace", Consumer: "gitea", Provision: "database", Local: "main"},
		{Node: "ace", Consumer: "gitea", Provision: "cache"},
	} {
		if got := string(k.AppendTo(prefix)); got != "x:"+k.String() {
			t.Errorf("%+v.AppendTo(%q) = %q; want %q", k, prefix, got, "x:"+k.String())
		}
	}
	nm := NodeModule{Node: "ace", Module: "gitea"}
	if got := string(nm.AppendTo(prefix)); got != "x:ace.gitea" {
		t.Errorf("%+v.AppendTo(%q) = %q; want %q", nm, prefix, got, "x:ace.gitea")
	}
	for _, c := range [][5]string{
		{"control", "redis", "redis", "cache", ""},
		{"ace", "gitea", "postgres", "database", "main"},
	} {
		want := CredentialKey(c[0], c[1], c[2], c[3], c[4])
		got, n := AppendCredentialKey(prefix, c[0], c[1], c[2], c[3], c[4])
		if string(got) != "x:"+want.String() || string(got[len(got)-n:]) != want.Local {
			t.Errorf("AppendCredentialKey(%q, %q) = %q with local %q; want %q with local %q",
				prefix, c, got, got[len(got)-n:], "x:"+want.String(), want.Local)
		}
	}
}

// Parsing a key in shape allocates nothing: the seat and the kit parse a
// key per change they take (hundreds of thousands at a cold start).
func TestParseKeysAllocateNothing(t *testing.T) {
	for name, parse := range map[string]func() error{
		"provision":   func() error { _, err := ParseProvisionKey("web1.app.credential.pg_database_main"); return err },
		"node module": func() error { _, err := ParseNodeModule("web1.app"); return err },
		"want":        func() error { _, err := ParseWantKey("want.web1.app"); return err },
		"have":        func() error { _, err := ParseHaveKey("web1.app"); return err },
	} {
		if err := parse(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if n := testing.AllocsPerRun(100, func() { _ = parse() }); n != 0 {
			t.Errorf("%s: parsing allocates %.0f times; want 0", name, n)
		}
	}
}
