package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestWriteKeptJSONAsEncoderWrites checks that printKept's JSON, written
// one bucket at a time, is byte for byte what json.Encoder with
// SetIndent("", "  ") writes for the whole object: nested values, an empty
// bucket, a value that is not JSON, keys and values that need escaping.
func TestWriteKeptJSONAsEncoderWrites(t *testing.T) {
	t.Parallel()
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
		{"spaced", []getItem{
			{Key: "a", Value: []byte(" {\n\t\"a\" : [ ] , \"b\":{ },\"c\":[1 ,-2.5e+3,true,false,null],\r\n\"d\":{\"e\":[{}]}} ")},
			{Key: "b", Value: []byte(`"\\\"<\u003c\n\u2028` + "\u2028\u2029é" + `"`)},
			{Key: "c", Value: []byte(`0`)},
			{Key: "d", Value: []byte("{\"x\":\"a\u2028\"")},
			{Key: "e", Value: nil},
			{Key: "key \"<\u00e9>\"", Value: []byte(`{"k<&>":"v"}`)},
		}},
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

// FuzzAppendIndented holds appendIndented and appendQuoted to encoding/json:
// for any valid JSON value, what json.Encoder with SetIndent("    ", "  ")
// writes for it as a json.RawMessage; for any string, json.Marshal.
func FuzzAppendIndented(f *testing.F) {
	for _, s := range []string{`{"a":[1,{"b":"<&>"}],"c":{}}`, " [ ] ", `"\u2028\\\""`, "\"\xe2\x80\xa8\xe2\x80\xa9\"", `-0.5e10`, `{"k": null , "t":true}`, "\"\xff\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		if got, want := appendQuoted(nil, string(v)), mustMarshal(t, string(v)); string(got) != string(want) {
			t.Errorf("appendQuoted(%q) = %s; json.Marshal gives %s", v, got, want)
		}
		if !json.Valid(v) {
			return
		}
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetIndent("    ", "  ")
		if err := enc.Encode(json.RawMessage(v)); err != nil {
			t.Fatalf("json.Encoder: %v", err)
		}
		if got := appendIndented([]byte("x"), v, "    ", "  "); string(got) != "x"+strings.TrimSuffix(want.String(), "\n") {
			t.Errorf("appendIndented(%q) =\n%s\njson.Encoder writes\n%s", v, got[1:], want.String())
		}
	})
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// BenchmarkWriteKeptJSON writes 32 407 provisions (up --once's print of
// gen --nodes 1000 --modules 8) with writeKeptJSON, and as it did before
// with a json.Encoder per value (the oracle of the tests above).
func BenchmarkWriteKeptJSON(b *testing.B) {
	items := make([]getItem, 32407)
	for i := range items {
		key := fmt.Sprintf("node-%04d.app-%d.credential.postgres_database", i/32, i%32)
		items[i] = getItem{Key: key, Value: []byte(`{"provision":"credential","local":"postgres_database","consumer":{"module":"app","node":"node-0001"},` +
			`"provider":{"module":"mesh-vault","node":"control"},"state":"provided","reference":{"id":"` + key + `","generation":1},"at":"2026-12-01T05:25:12.214156567Z"}`)}
	}
	b.Run("appendIndented", func(b *testing.B) {
		for b.Loop() {
			w := bufio.NewWriter(io.Discard)
			if err := writeKeptJSON(w, "provisions", items); err != nil {
				b.Fatal(err)
			}
			w.Flush()
		}
	})
	b.Run("encoder", func(b *testing.B) {
		for b.Loop() {
			w := bufio.NewWriter(io.Discard)
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetIndent("    ", "  ")
			for _, it := range items {
				k, _ := json.Marshal(it.Key)
				w.Write(k)
				buf.Reset()
				if err := enc.Encode(asJSON(it.Value)); err != nil {
					b.Fatal(err)
				}
				w.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
			}
			w.Flush()
		}
	})
}

// TestReadKeptFromAFollowedCopy checks that printKept's provisions come
// from the copy up followed when it has caught up with the bucket (the same
// keys and values as a read of the bucket), and from a read of the bucket
// when the copy stopped behind it (a key written after it stopped is
// printed, a key deleted after it stopped is not).
func TestReadKeptFromAFollowedCopy(t *testing.T) {
	s := bustest.Server(t)
	seatKeys(t, s)
	_, js := bustest.Connect(t, s, "operator")
	ctx := bustest.Context(t)
	follow, stop := context.WithCancel(ctx)
	defer stop()
	c := bus.Follow(follow, js, mesh.ProvisionsBucket, bus.Options{})
	<-c.Ready()
	read := func(followed *bus.Copy) map[string]string {
		t.Helper()
		ans, err := readKept(ctx, js, mesh.ProvisionsBucket, followed)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, it := range ans.Items {
			m[it.Key] = string(it.Value)
		}
		return m
	}
	fromBus := read(nil)
	if len(fromBus) < 4 {
		t.Fatalf("the bucket holds %d provisions; want at least 4", len(fromBus))
	}
	if fromCopy := read(c); !maps.Equal(fromCopy, fromBus) {
		t.Errorf("read from the followed copy:\n%v\nwant what the bucket holds:\n%v", fromCopy, fromBus)
	}

	stop()
	kv, err := js.KeyValue(ctx, mesh.ProvisionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "ace.gitea.credential.late", []byte(`{"state":"asked"}`)); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "ace.gitea.route"); err != nil {
		t.Fatal(err)
	}
	defer func(w time.Duration) { caughtUpWait = w }(caughtUpWait)
	caughtUpWait = 100 * time.Millisecond
	got := read(c)
	if got["ace.gitea.credential.late"] != `{"state":"asked"}` {
		t.Errorf("a provision written after the copy stopped is not read: %v", got)
	}
	if _, has := got["ace.gitea.route"]; has {
		t.Errorf("a provision deleted after the copy stopped is read")
	}
	if len(got) != len(fromBus) {
		t.Errorf("read %d provisions; want %d", len(got), len(fromBus))
	}
}
