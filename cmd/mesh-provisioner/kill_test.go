package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/examples"
	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// kill sends p SIGKILL (kill -9) and waits until it has exited; its exit is
// then no failure of the test.
func (p *process) kill(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatalf("kill -9 %s: %v", p.name, err)
	}
	<-p.done
}

// TestClusterSurvivesKills runs the three servers auth gen writes, each
// nats-server's own binary, with the vault, the ask router and the seat as
// processes of their own under their generated users and buckets of three
// replicas. Right after the homelab mesh is applied, the leader of the
// provisions stream and the seat are killed with SIGKILL; the server is
// started again on its store and a new seat takes over. Every credential
// provision of the homelab is provided (none lost), and removing
// vaultwarden from ace retires its two keys, each with its ask recorded
// once (no key retiring without its ask, no ask raised twice).
func TestClusterSurvivesKills(t *testing.T) {
	t.Parallel()
	bustest.Long(t, "that a three-server cluster of separate processes loses no credential when the provisions stream's leader and the seat are killed with SIGKILL, and retires each key once with one ask")
	dir := filepath.Join(t.TempDir(), "auth")
	file := filepath.Join(t.TempDir(), "homelab.yaml")
	if err := os.WriteFile(file, examples.Homelab, 0o600); err != nil {
		t.Fatal(err)
	}
	var urls []string
	args := []string{"auth", "gen", "-f", file, "-o", dir, "--cluster", "lab"}
	for i := 1; i <= 3; i++ {
		client, route, http, leaf := freePort(t), freePort(t), freePort(t), freePort(t)
		args = append(args, "--server", fmt.Sprintf("nats-%d=127.0.0.1:%d:%d:%d:%d", i, client, route, http, leaf))
		urls = append(urls, "nats://127.0.0.1:"+strconv.Itoa(client))
	}
	runMain(t, args...)
	var confs []string
	var servers []*process
	for i := 1; i <= 3; i++ {
		conf := filepath.Join(dir, auth.ServersDir, "nats-"+strconv.Itoa(i), auth.ConfigFile)
		confs = append(confs, conf)
		servers = append(servers, startNATS(t, conf))
	}
	all := strings.Join(urls, ",")
	as := func(user string, args ...string) []string {
		return append(args, "--nats", all, "--creds", auth.CredsPath(dir, user), "--replicas", "3")
	}

	var nc *nats.Conn
	var js jetstream.JetStream
	waitFor(t, 30*time.Second, "the servers to take the operator", servers, func() bool {
		var err error
		nc, js, err = bus.Connect(bus.Dial{URL: all, Name: "operator", Creds: auth.CredsPath(dir, access.DefaultOperator)})
		return err == nil
	})
	t.Cleanup(nc.Close)
	ctx := bustest.Context(t)
	waitFor(t, 30*time.Second, "the cluster's JetStream", servers, func() bool {
		_, err := js.AccountInfo(ctx)
		return err == nil
	})
	vault := start(t, "vault", as(mesh.VaultModule, "vault", "--node", "control", "--data", t.TempDir())...)
	router := start(t, "router", as("mesh-asks", "router")...)
	seat := start(t, "seat", as(mesh.Module, "serve", "--id", "seat-1")...)
	for _, b := range meshfile.Buckets {
		waitFor(t, time.Minute, "the seat's bucket "+b, []*process{vault, router, seat}, func() bool {
			_, err := bus.AwaitBucket(ctx, js, b, 5*time.Second)
			return err == nil
		})
	}
	homelab, err := meshfile.Parse("homelab.yaml", examples.Homelab)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := meshfile.Apply(ctx, js, homelab, time.Now()); err != nil {
		t.Fatal(err)
	}

	// kill -9 of the provisions stream's leader and of the seat, while the
	// seat composes what was applied.
	st, err := js.Stream(ctx, "KV_"+mesh.ProvisionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	leader := -1
	if ci := st.CachedInfo().Cluster; ci != nil {
		leader, _ = strconv.Atoi(strings.TrimPrefix(ci.Leader, "nats-"))
		leader--
	}
	if leader < 0 || leader > 2 {
		t.Fatalf("the provisions stream's leader is %+v; want nats-1, -2 or -3", st.CachedInfo().Cluster)
	}
	servers[leader].kill(t)
	seat.kill(t)
	servers[leader] = startNATS(t, confs[leader])
	// The new seat is started once every stream has a leader again with
	// three replicas current: a seat process that meets the bus's timeout
	// while it makes its buckets at start exits.
	waitFor(t, time.Minute, "every stream led again, its three replicas current", servers, func() bool {
		n := 0
		l := js.ListStreams(ctx)
		for info := range l.Info() {
			n++
			ci := info.Cluster
			if ci == nil || ci.Leader == "" || len(ci.Replicas) != 2 {
				return false
			}
			for _, r := range ci.Replicas {
				if !r.Current || r.Offline {
					return false
				}
			}
		}
		return l.Err() == nil && n > 0
	})
	seat = start(t, "seat", as(mesh.Module, "serve", "--id", "seat-2")...)
	procs := []*process{vault, router, seat}

	provisions := bus.Follow(ctx, js, mesh.ProvisionsBucket, bus.Options{Leader: true})
	records := bus.Follow(ctx, js, mesh.RecordsBucket, bus.Options{Leader: true})
	provision := func(key string) (mesh.Provision, bool) {
		it, ok := provisions.Get(key)
		var p mesh.Provision
		return p, ok && json.Unmarshal(it.Value, &p) == nil
	}
	missing := ""
	t.Cleanup(func() {
		if t.Failed() && missing != "" {
			t.Logf("last missing: %s", missing)
			e, err := bus.LeaderGet(context.Background(), js, mesh.SeatBucket, mesh.HolderKey)
			t.Logf("the lease from its leader: %q rev %d deleted %v err %v", e.Value, e.Revision, e.Deleted, err)
			if st, err := js.Stream(context.Background(), "KV_"+mesh.SeatBucket); err == nil {
				i := st.CachedInfo()
				t.Logf("lease stream: max age %v, state %+v, cluster %+v", i.Config.MaxAge, i.State, i.Cluster)
			}
		}
	})
	waitFor(t, time.Minute, "every credential provision provided after the kills", procs, func() bool {
		for _, k := range homelabCredentials {
			if p, ok := provision(k); !ok || p.State != mesh.Provided {
				missing = fmt.Sprintf("%s: held %v, state %q, why %q", k, ok, p.State, p.Why)
				return false
			}
		}
		return true
	})

	// vaultwarden leaves ace: its two keys retire, each with one ask.
	text := string(examples.Homelab)
	for _, cut := range [][2]string{
		{"ace: [gitea, vaultwarden, node-tools]", "ace: [gitea, node-tools]"},
		{"ace: {gitea: b7c100, vaultwarden: 4a4a4a, node-tools: 0d0d01}", "ace: {gitea: b7c100, node-tools: 0d0d01}"},
	} {
		if !strings.Contains(text, cut[0]) {
			t.Fatalf("examples/homelab.yaml no longer holds %q", cut[0])
		}
		text = strings.Replace(text, cut[0], cut[1], 1)
	}
	without, err := meshfile.Parse("homelab-without-vaultwarden.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := meshfile.Apply(ctx, js, without, time.Now()); err != nil {
		t.Fatal(err)
	}
	retiring := []string{"ace.vaultwarden.database", "ace.vaultwarden.route"}
	waitFor(t, 30*time.Second, "the asks of "+strings.Join(retiring, ", ")+" recorded", procs, func() bool {
		for _, k := range retiring {
			p, ok := provision(k)
			if !ok || p.State != mesh.Retiring || p.Ask == "" {
				return false
			}
			if _, ok := records.Get(p.Ask); !ok {
				return false
			}
		}
		return true
	})
	asked := map[string][]string{}
	records.Range(func(id string, it bus.Item) bool {
		var r mesh.Record
		if err := json.Unmarshal(it.Value, &r); err != nil {
			t.Errorf("record %s does not decode: %v", id, err)
		} else if r.State == mesh.RecordOpen {
			asked[r.Ask.About] = append(asked[r.Ask.About], id)
		}
		return true
	})
	for _, k := range retiring {
		if ids := asked["provision."+k]; len(ids) != 1 {
			t.Errorf("open asks about %s: %v; want one", k, ids)
		}
	}
	if len(asked) != len(retiring) {
		t.Errorf("open asks about %v; want only %v", asked, retiring)
	}
}
