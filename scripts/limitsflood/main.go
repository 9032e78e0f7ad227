// Command limitsflood measures what one party's credentials make the server
// hold beyond its buckets, under the bounds the generated JWTs and buckets
// set (docs/trust.md, "Connections and subscriptions are bounded" and
// "Direct consumers are bounded in time only"). It generates the homelab
// mesh's users (auth.Gen), starts an embedded nats-server from the
// generated configuration (package bus, in this process), makes the plans
// bucket as the seat does, and then:
//
//   - as the plain module -module (it may only ask its own secrets), opens
//     up to -conns connections and subscribes -subs subjects of its inbox
//     on each, and prints how many the server took and refused;
//   - as the node client -client, asks -consumers "direct sourcing"
//     consumers of its plans with an hour's inactive threshold, then as
//     many asking none, delivering to subjects nobody subscribes to, and
//     prints how many were made (none: no scoped party may create a
//     consumer, so the first is refused and the rest not tried), what the
//     servers' JetStream report lists, and again once the buckets'
//     consumer inactive threshold (access.ConsumerInactive) has passed.
//
// After each step it prints the server's connections and subscriptions
// and the process's Go heap in use (the server's memory).
//
// Run it from the repository's root:
//
//	go run ./scripts/limitsflood [-conns 300] [-subs 1000] [-consumers 3000]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
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
	conns := flag.Int("conns", 300, "connections the module opens")
	subs := flag.Int("subs", 1000, "subscriptions it asks on each")
	consumers := flag.Int("consumers", 3000, "direct consumers the client asks, each way")
	module := flag.String("module", "grafana", "the plain module whose credentials flood subscriptions")
	client := flag.String("client", "ace", "the node whose client's credentials flood consumers")
	flag.Parse()
	if err := run(*conns, *subs, *consumers, *module, *client); err != nil {
		fmt.Fprintln(os.Stderr, "limitsflood:", err)
		os.Exit(1)
	}
}

func run(conns, subs, consumers int, module, node string) error {
	dir, err := os.MkdirTemp("", "limitsflood")
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	seat, err := dial(srv, res.Creds[access.SeatUser], access.SeatUser)
	if err != nil {
		return err
	}
	defer seat.Close()
	js, err := jetstream.New(seat)
	if err != nil {
		return err
	}
	if _, err := bus.Bucket(ctx, js, mesh.PlansBucket, 1); err != nil {
		return err
	}
	say(srv, "start")

	// Subscriptions, as the module.
	var held []*nats.Conn
	var refusedConn error
	for range conns {
		nc, err := dial(srv, res.Creds[module], module)
		if err != nil {
			refusedConn = err
			break
		}
		held = append(held, nc)
		for j := range subs {
			// A handler, not a channel: nats.go gives each channel
			// subscription a 64 Ki-message buffer in this process.
			if _, err := nc.Subscribe(fmt.Sprintf("%s.flood.%d", access.InboxPrefix(module), j), func(*nats.Msg) {}); err != nil {
				return err
			}
		}
		if err := nc.Flush(); err != nil {
			return err
		}
	}
	v, err := srv.Varz(nil)
	if err != nil {
		return err
	}
	fmt.Printf("%s asked %d connections x %d subscriptions: %d connections taken (then: %v); the server holds %d subscriptions in all\n",
		module, conns, subs, len(held), refusedConn, v.Subscriptions)
	say(srv, "subscription flood")
	for _, nc := range held {
		nc.Close()
	}

	// Direct consumers, as the client.
	user := access.ClientUser(node)
	nc, err := dial(srv, res.Creds[user], user)
	if err != nil {
		return err
	}
	defer nc.Close()
	stream := "KV_" + mesh.PlansBucket
	filter := "$KV." + mesh.PlansBucket + "." + node + ".>"
	name := access.ConsumerNames(user, bus.WatchTokenOf(bus.AccountCreds(res.Creds[access.SeatUser], access.Services), user))[0]
	for _, threshold := range []time.Duration{time.Hour, 0} {
		made, failed := 0, 0
		var first string
		for i := range consumers {
			body, err := json.Marshal(map[string]any{"stream_name": stream, "config": map[string]any{
				"name": name, "filter_subject": filter, "direct": true, "sourcing": true, "deliver_policy": "all",
				"ack_policy": "none", "deliver_subject": fmt.Sprintf("%s.nobody.%d", access.InboxPrefix(user), i),
				"inactive_threshold": threshold}})
			if err != nil {
				return err
			}
			m, err := nc.Request("$JS.API.CONSUMER.CREATE."+stream+"."+name+"."+filter, body, 2*time.Second)
			if errors.Is(err, nats.ErrTimeout) {
				// The server refused the publish (its permissions
				// violation is asynchronous): the rest would be too.
				failed, first = consumers-made, "no answer: the server refused the create's subject"
				break
			}
			if err != nil {
				return err
			}
			var resp struct {
				Error *struct {
					Description string `json:"description"`
				} `json:"error"`
			}
			if err := json.Unmarshal(m.Data, &resp); err != nil {
				return err
			}
			if resp.Error != nil {
				failed++
				first = resp.Error.Description
				continue
			}
			made++
		}
		fmt.Printf("%s asked %d direct consumers with an inactive threshold of %s: %d made, %d refused (%s)\n",
			user, consumers, threshold, made, failed, first)
	}
	if err := direct(srv, stream, "after the consumer flood"); err != nil {
		return err
	}
	wait := access.ConsumerInactive + 2*time.Second
	time.Sleep(wait) // a figure after the threshold, not a test's wait
	return direct(srv, stream, fmt.Sprintf("%s later", wait))
}

// dial connects to srv as user with its credentials file.
func dial(srv *bus.Server, creds, user string) (*nats.Conn, error) {
	return nats.Connect(srv.URL(), nats.UserCredentials(creds), nats.CustomInboxPrefix(access.InboxPrefix(user)),
		nats.NoReconnect(), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
}

// direct prints how many direct consumers of stream the server's
// JetStream report lists, and say's figures.
func direct(srv *bus.Server, stream, when string) error {
	jsz, err := srv.Jsz(&server.JSzOptions{Accounts: true, Streams: true, Consumer: true, DirectConsumer: true})
	if err != nil {
		return err
	}
	n := -1
	for _, a := range jsz.AccountDetails {
		for _, s := range a.Streams {
			if s.Name == stream {
				n = len(s.DirectConsumer)
			}
		}
	}
	if n < 0 {
		return errors.New("the JetStream report names no " + stream)
	}
	fmt.Printf("%s: %d direct consumers of %s\n", when, n, stream)
	say(srv, when)
	return nil
}

// say prints the server's connections and subscriptions and the Go heap in
// use.
func say(srv *bus.Server, when string) {
	v, err := srv.Varz(nil)
	if err != nil {
		fmt.Println(when, "varz:", err)
		return
	}
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	fmt.Printf("  %s: %d connections, %d subscriptions, heap in use %.0f MiB\n", when, v.Connections, v.Subscriptions,
		float64(m.HeapInuse)/(1<<20))
}
