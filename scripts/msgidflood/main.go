// Command msgidflood measures what a writer's Nats-Msg-Id headers make the
// server hold: it starts an embedded nats-server with JetStream (package
// bus, in this process), makes a bucket as the seat does (bus.Bucket:
// the 100 ms duplicate window) and, for comparison, one with the
// library's default (two minutes), and puts one key of each -n times with
// a distinct -id-bytes Msg-Id header, as a client flooding its own key
// could. After each flood it prints the process's Go heap in use (the
// server's memory, held for the window) at once and once the bucket's
// window has passed.
//
// Run it from the repository's root:
//
//	go run ./scripts/msgidflood [-n 10000] [-id-bytes 60000]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
)

func main() {
	n := flag.Int("n", 10000, "puts per bucket")
	idBytes := flag.Int("id-bytes", 60000, "bytes of each Nats-Msg-Id")
	flag.Parse()
	if err := run(*n, *idBytes); err != nil {
		fmt.Fprintln(os.Stderr, "msgidflood:", err)
		os.Exit(1)
	}
}

func heapMiB() float64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapInuse) / (1 << 20)
}

func run(n, idBytes int) error {
	dir, err := os.MkdirTemp("", "msgidflood")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := bus.StartServer(bus.ServerConfig{Dir: dir, Listen: "127.0.0.1:0"})
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx := context.Background()
	if _, err := bus.Bucket(ctx, js, "flood_seat", 0); err != nil {
		return err
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "flood_default", History: 1}); err != nil {
		return err
	}
	fmt.Printf("msgidflood: %d puts per bucket, each with a %d-byte Nats-Msg-Id; heap at start %.0f MiB\n", n, idBytes, heapMiB())
	pad := strings.Repeat("x", idBytes)
	for _, b := range []string{"flood_seat", "flood_default"} {
		st, err := js.Stream(ctx, "KV_"+b)
		if err != nil {
			return err
		}
		window := st.CachedInfo().Config.Duplicates
		before := heapMiB()
		start := time.Now()
		for i := range n {
			m := nats.NewMsg("$KV." + b + ".ace.gitea")
			m.Data = []byte(`{}`)
			m.Header.Set(jetstream.MsgIDHeader, strconv.Itoa(i)+pad[:idBytes-len(strconv.Itoa(i))])
			if _, err := js.PublishMsg(ctx, m); err != nil {
				return fmt.Errorf("put %d on %s: %w", i, b, err)
			}
		}
		took := time.Since(start)
		after := heapMiB()
		time.Sleep(window + 2*time.Second) // the window passes; the server sweeps its ids
		later := heapMiB()
		fmt.Printf("%-14s duplicate window %-6s heap before %4.0f MiB, after the flood %5.0f MiB (%s), %s later %4.0f MiB\n",
			b, window, before, after, took.Round(time.Millisecond), (window + 2*time.Second).String(), later)
	}
	return nil
}
