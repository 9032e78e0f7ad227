package pgprovider

import "testing"

func TestScramMatchesOnlyItsPassword(t *testing.T) {
	v, err := scramVerifier("the-value")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		verifier, password string
		want               bool
	}{
		{v, "the-value", true},
		{v, "the-value ", false},
		{v, "", false},
		{"md5" + "0123456789abcdef0123456789abcdef", "the-value", false},
		{"SCRAM-SHA-256$4096:c2FsdA==$bm90:a2V5cw==", "the-value", false},
		{"SCRAM-SHA-256$notanumber:c2FsdA==$bm90:a2V5cw==", "the-value", false},
		{"SCRAM-SHA-256$4096:c2FsdA==", "the-value", false},
		{"", "the-value", false},
	} {
		if got := scramMatches(c.verifier, c.password); got != c.want {
			t.Errorf("scramMatches(%q, %q) = %v; want %v", c.verifier, c.password, got, c.want)
		}
	}
}
