package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"testing"
)

// TestWriteKeptJSONAsEncoderWrites checks that printKept's JSON, written
// one bucket at a time, is byte for byte what json.Encoder with
// SetIndent("", "  ") writes for the whole object: nested values, an empty
// bucket, a value that is not JSON, keys and values that need escaping.
func TestWriteKeptJSONAsEncoderWrites(t *testing.T) {
	buckets := []struct {
		name  string
		items []getItem
	}{
		{"plans", []getItem{
			{Key: "a.b", Value: []byte(`{"node":"a","dirs":[{"name":"x"}],"ports":[],"config":{}}`)},
			{Key: "a.c", Value: []byte(`{"why":"<held> & \u2028"}`)},
		}},
		{"provisions", []getItem{
			{Key: "n.m.credential.x_y", Value: []byte("not json")},
			{Key: "n.m.route", Value: []byte(` [1, 2, {"a": null}] `)},
		}},
		{"refused", nil},
	}
	all := map[string]map[string]json.RawMessage{}
	var got bytes.Buffer
	w := bufio.NewWriter(&got)
	w.WriteString("{")
	for i, b := range buckets {
		m := map[string]json.RawMessage{}
		for _, it := range b.items {
			m[it.Key] = asJSON(it.Value)
		}
		all[b.name] = m
		if i > 0 {
			w.WriteString(",")
		}
		if err := writeKeptJSON(w, b.name, b.items); err != nil {
			t.Fatal(err)
		}
	}
	w.WriteString("\n}\n")
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	enc := json.NewEncoder(&want)
	enc.SetIndent("", "  ")
	if err := enc.Encode(all); err != nil {
		t.Fatal(err)
	}
	if got.String() != want.String() {
		t.Errorf("writeKeptJSON wrote\n%s\nwant (json.Encoder)\n%s", got.String(), want.String())
	}
}
