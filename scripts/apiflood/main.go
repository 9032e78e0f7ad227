// Command apiflood measures what one scoped party's flood of JetStream API
// requests does to an operator's requests (issue 18): every account's API
// requests wait in one queue of the server's, which has no per-user rate
// limit. It generates the homelab mesh's users (auth.Gen), starts an
// embedded nats-server from the generated configuration, makes and fills
// the plans bucket as the seat does, serves the scoped parties' watches as
// the seat does (bus.ServeWatches), and measures an operator's get of
// plans as `get` does it (the bucket's stream info, a watch of every key to
// its initial values' end) -samples times, one after the other, printing
// p50 and p99:
//
//   - quiet: nothing else runs;
//   - before: the flood the party -party could send before (its user
//     allowed the account's JetStream info and the stream info of each
//     bucket it reads or writes whole): those subjects, sent from a user
//     that still may (the seat's), beside everything of the next step;
//   - after: the party's own credentials flood every "$JS.API." subject
//     they allow (direct gets of its keys, which the stream serves),
//     "$JS.API.INFO" (refused: the server's permissions violations are
//     counted), and the seat's watch verb on every bucket it reads whole
//     (the seat serves one request of an asker at a time).
//
// With each flood it prints what the server's JetStream API served a
// second (its report's API total: the requests that waited in its queue).
//
// Each flood keeps -flooders connections publishing requests as fast as
// they can, each with its reply subject, never waiting for an answer.
//
// Run it from the repository's root:
//
//	go run ./scripts/apiflood [-samples 200] [-party mesh-vault] [-flooders 4]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/examples"
	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

func main() {
	samples := flag.Int("samples", 200, "operator gets measured in each step")
	party := flag.String("party", access.VaultUser, "the scoped party whose credentials flood")
	flooders := flag.Int("flooders", 4, "connections each flood publishes on")
	keys := flag.Int("keys", 200, "keys of the plans bucket")
	flag.Parse()
	if err := run(*samples, *party, *flooders, *keys); err != nil {
		fmt.Fprintln(os.Stderr, "apiflood:", err)
		os.Exit(1)
	}
}

func run(samples int, user string, flooders, keys int) error {
	dir, err := os.MkdirTemp("", "apiflood")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	f, err := meshfile.Parse("homelab.yaml", examples.Homelab)
	if err != nil {
		return err
	}
	parties, err := access.Parties(auth.MeshOf(f, nil))
	if err != nil {
		return err
	}
	var party access.Party
	for _, p := range parties {
		if p.User == user {
			party = p
		}
	}
	if party.User == "" {
		return fmt.Errorf("no party %s in the homelab mesh", user)
	}
	authDir := filepath.Join(dir, "auth")
	res, err := auth.Gen(authDir, parties, auth.Options{Source: "homelab.yaml", StoreDir: filepath.Join(dir, "js")})
	if err != nil {
		return err
	}
	srv, err := bus.StartServer(bus.ServerConfig{Dir: filepath.Join(dir, "js"), Listen: "127.0.0.1:0", ConfigFile: res.Config})
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

	// The seat: the buckets, and the watches of scoped parties.
	seatDial := bus.Dial{URL: srv.URL(), Creds: res.Creds[access.SeatUser], Name: "seat", Log: quiet}
	seat, seatJS, err := bus.Connect(seatDial)
	if err != nil {
		return err
	}
	defer seat.Close()
	whole := wholeBuckets(party)
	for _, b := range append([]string{mesh.PlansBucket}, whole...) {
		if _, err := bus.Bucket(ctx, seatJS, b, 1); err != nil {
			return fmt.Errorf("bucket %s: %w", b, err)
		}
	}
	plans, err := seatJS.KeyValue(ctx, mesh.PlansBucket)
	if err != nil {
		return err
	}
	for i := range keys {
		if _, err := plans.Put(ctx, fmt.Sprintf("n%d.app", i), []byte(`{"fp":"0a0a0a"}`)); err != nil {
			return err
		}
	}
	ans, err := bus.ConnectAnswerer(seatDial)
	if err != nil {
		return err
	}
	defer ans.Close()
	if err := bus.ServeWatches(ctx, ans, seatJS, quiet); err != nil {
		return err
	}

	op, err := nats.Connect(srv.URL(), nats.UserCredentials(res.Creds[access.DefaultOperator]),
		nats.CustomInboxPrefix(access.InboxPrefix(access.DefaultOperator)))
	if err != nil {
		return err
	}
	defer op.Close()
	opJS, err := jetstream.New(op)
	if err != nil {
		return err
	}

	// What the party may publish now, and what it could before.
	now := apiSubjects(bus.CredsPublish(res.Creds[user]))
	before := []string{"$JS.API.INFO"}
	for _, b := range whole {
		before = append(before, "$JS.API.STREAM.INFO.KV_"+b)
	}
	fmt.Printf("%s may publish of JetStream's API: %s\n", user, strings.Join(now, ", "))
	fmt.Printf("%s could before: %s, beside them\n", user, strings.Join(before, ", "))
	fmt.Printf("an operator's get of %s (%d keys): its stream info and a watch of every key; %d gets a step\n",
		mesh.PlansBucket, keys, samples)

	measure := func(step string) error {
		var took []time.Duration
		failed := 0
		for range samples {
			t0 := time.Now()
			if err := get(ctx, opJS, keys); err != nil {
				failed++
			}
			took = append(took, time.Since(t0))
		}
		slices.Sort(took)
		fmt.Printf("%-7s p50 %8s  p99 %8s  max %8s  failed %d of %d\n", step, round(took[len(took)/2]),
			round(took[len(took)*99/100]), round(took[len(took)-1]), failed, samples)
		return nil
	}
	if err := measure("quiet"); err != nil {
		return err
	}

	// The party's flood, as it may now: both steps.
	var refused atomic.Int64
	partyConn := func() (*nats.Conn, error) {
		return nats.Connect(srv.URL(), nats.UserCredentials(res.Creds[user]),
			nats.CustomInboxPrefix(access.InboxPrefix(user)), nats.NoReconnect(),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				if strings.Contains(err.Error(), "Permissions Violation") {
					refused.Add(1)
				}
			}))
	}
	partyFlood := func(fctx context.Context, wg *sync.WaitGroup, sent *atomic.Int64) error {
		for range flooders {
			nc, err := partyConn()
			if err != nil {
				return err
			}
			// Its inbox: the replies, and its watches' deliveries.
			if _, err := nc.Subscribe(access.InboxPrefix(user)+".>", func(*nats.Msg) {}); err != nil {
				return err
			}
			flood(fctx, wg, nc, append(slices.Clone(now), "$JS.API.INFO"), nil, sent)
		}
		// The seat's watch verb, from its user in the requests account.
		ask, err := bus.ConnectIn(bus.Dial{URL: srv.URL(), Creds: res.Creds[user], Name: user + "-ask", Log: quiet}, access.Requests)
		if err != nil {
			return err
		}
		if _, err := ask.Subscribe(access.InboxPrefix(user)+".>", func(*nats.Msg) {}); err != nil {
			return err
		}
		var watches []string
		for _, b := range whole {
			s, err := access.WatchSubject(user, b, ">")
			if err != nil {
				return err
			}
			watches = append(watches, s)
		}
		body, _ := json.Marshal(map[string]any{"deliver": access.InboxPrefix(user) + ".w", "from": "last", "heartbeat": time.Second})
		flood(fctx, wg, ask, watches, body, sent)
		context.AfterFunc(fctx, func() { ask.Close() })
		return nil
	}

	step := func(name string, old bool) error {
		fctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		var sent atomic.Int64
		refused.Store(0)
		if err := partyFlood(fctx, &wg, &sent); err != nil {
			stop()
			return err
		}
		if old {
			for range flooders {
				nc, err := nats.Connect(srv.URL(), nats.UserCredentials(res.Creds[access.SeatUser]),
					nats.CustomInboxPrefix(access.InboxPrefix(access.SeatUser)), nats.NoReconnect())
				if err != nil {
					stop()
					return err
				}
				if _, err := nc.Subscribe(access.InboxPrefix(access.SeatUser)+".>", func(*nats.Msg) {}); err != nil {
					stop()
					return err
				}
				flood(fctx, &wg, nc, before, nil, &sent)
			}
		}
		time.Sleep(time.Second) // the queues fill
		t0, api0 := time.Now(), apiTotal(srv)
		sent.Store(0)
		err := measure(name)
		secs := time.Since(t0).Seconds()
		rate := float64(sent.Load()) / secs / 1000
		apiRate := float64(apiTotal(srv)-api0) / secs
		stop()
		wg.Wait()
		fmt.Printf("        the flood sent ~%.0fk requests/s; the server refused %d of the party's; its JetStream API served %.0f requests/s\n",
			rate, refused.Load(), apiRate)
		time.Sleep(3 * time.Second) // the queues drain
		return err
	}
	if err := step("before", true); err != nil {
		return err
	}
	return step("after", false)
}

// apiTotal returns how many JetStream API requests the server has served
// (its JetStream report's API total), or 0.
func apiTotal(srv *bus.Server) uint64 {
	jsz, err := srv.Jsz(&server.JSzOptions{})
	if err != nil {
		return 0
	}
	return jsz.API.Total
}

// get does what an operator's get of plans does on js: the bucket's
// stream info (binding it) and a watch of every key to the end of its
// initial values.
func get(ctx context.Context, js jetstream.JetStream, keys int) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, mesh.PlansBucket)
	if err != nil {
		return err
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return err
	}
	defer w.Stop()
	n := 0
	for {
		select {
		case e := <-w.Updates():
			if e == nil {
				if n != keys {
					return fmt.Errorf("the watch read %d keys; want %d", n, keys)
				}
				return nil
			}
			n++
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// flood publishes requests on subjects, in turn, on nc until ctx is done,
// each with a reply subject in nc's inbox, counting them in sent.
func flood(ctx context.Context, wg *sync.WaitGroup, nc *nats.Conn, subjects []string, body []byte, sent *atomic.Int64) {
	wg.Go(func() {
		defer nc.Close()
		reply := nc.NewRespInbox()
		for i := 0; ctx.Err() == nil; i++ {
			if err := nc.PublishRequest(subjects[i%len(subjects)], reply, body); err != nil {
				return
			}
			sent.Add(1)
			if i%256 == 255 {
				if err := nc.Flush(); err != nil {
					return
				}
			}
		}
	})
}

// apiSubjects returns the subjects of JetStream's API the allow list pub
// allows, each with its wildcards filled by a key ("probe").
func apiSubjects(pub []string) []string {
	fill := strings.NewReplacer("*", "probe", ">", "probe")
	var out []string
	for _, p := range pub {
		if strings.HasPrefix(p, "$JS.API.") {
			out = append(out, fill.Replace(p))
		}
	}
	return out
}

// wholeBuckets returns the buckets p reads or writes every key of.
func wholeBuckets(p access.Party) []string {
	var out []string
	for _, r := range p.Rules() {
		if (r.Act == access.Read || r.Act == access.Write) && r.Keys == access.AllKeys && r.Target != access.AnyBucket &&
			!slices.Contains(out, r.Target) {
			out = append(out, r.Target)
		}
	}
	slices.Sort(out)
	return out
}

func round(d time.Duration) time.Duration {
	switch {
	case d > time.Second:
		return d.Round(10 * time.Millisecond)
	case d > time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}
