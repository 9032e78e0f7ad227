package kit_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/kit"
	"github.com/mesh-provisioner/mesh-provisioner/kit/kittest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

const shelfMesh = `
nodes: [hub, web]
modules:
  shelf:
    builds:
      - fp: 5e1f01
        manifest: {module: shelf, provides: [{name: space, answered-by: helper}], state: [bound], reads: [mesh-provisioner.plans]}
  shop:
    builds:
      - fp: 5e1f02
        manifest: {module: shop, requires: [{provision: space, from: shelf}]}
placement:
  hub: [shelf]
  web: [shop]
`

// A provider written with kit, run as its own process would run it: on
// the bus users `auth gen` made for it, connected by kit.Connect, it
// provides its key. The same users on a plain nats.go connection are
// refused by the server (their replies and consumers are scoped), which is
// why kit.Connect exists.
func TestConnectRunsAProviderAsItsOwnUsers(t *testing.T) {
	dir := t.TempDir()
	f, err := meshfile.Parse("shelf.yaml", []byte(shelfMesh))
	if err != nil {
		t.Fatal(err)
	}
	parties, err := access.Parties(auth.MeshOf(f, []string{"operator"}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := auth.Gen(dir, parties, auth.Options{StoreDir: filepath.Join(dir, "js")})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := bus.StartServer(bus.ServerConfig{Dir: t.TempDir(), Listen: "127.0.0.1:0", ConfigFile: res.Config})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	ctx := bustest.Context(t)

	// The seat makes the buckets, asks for the key and makes the
	// provider's watches' consumers.
	_, seat, err := bus.Connect(bus.Dial{URL: srv.URL(), Name: "seat", Creds: res.Creds[access.SeatUser]})
	if err != nil {
		t.Fatal(err)
	}
	bustest.ServeWatchesAs(t, srv.URL(), res.Creds[access.SeatUser])
	provisions, err := bus.Bucket(ctx, seat, mesh.ProvisionsBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	bound, err := bus.Bucket(ctx, seat, mesh.BoundBucket("shelf"), 0)
	if err != nil {
		t.Fatal(err)
	}
	key, p := kittest.Requirement(mesh.Ref{Node: "web", Module: "shop"}, "space", "", mesh.Ref{Node: "hub", Module: "shelf"})
	putJSON(t, ctx, provisions, key.String(), p)

	// A plain nats.go connection with the provider's file: refused.
	refused := make(chan error, 16)
	plain, err := nats.Connect(srv.URL(), nats.UserCredentials(res.Creds["shelf"]),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case refused <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	pjs, _ := jetstream.New(plain)
	pctx, stop := context.WithCancel(ctx)
	if _, err := kit.Start(pctx, kit.Config{Module: "shelf", Node: "hub", JetStream: pjs, Handler: kit.Funcs{}}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-refused:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Errorf("a plain connection's kit: %v; want a permissions violation", err)
		}
	case <-ctx.Done():
		t.Fatal("a plain connection with the provider's file was never refused")
	}
	stop()

	// kit.Connect: the kit provides the key.
	conn, err := kit.Connect(srv.URL(), res.Creds["shelf"], "shelf", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var mu sync.Mutex
	var asked []string
	h := kit.Funcs{ProvideFunc: func(_ context.Context, k mesh.ProvisionKey, _ mesh.Provision) (kit.Result, error) {
		mu.Lock()
		asked = append(asked, k.String())
		mu.Unlock()
		return kit.Provided("", 0), nil
	}}
	k, err := kit.Start(ctx, kit.Config{Module: "shelf", Node: "hub", JetStream: conn.JetStream, Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	<-k.Ready()
	bustest.WaitFor(t, 0, "shelf's entry of web.shop.space provided", func() bool {
		e, err := bound.Get(ctx, key.String())
		return err == nil && strings.Contains(string(e.Value()), `"state":"provided"`)
	})
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 1 || asked[0] != "web.shop.space" {
		t.Errorf("the handler was asked %q; want web.shop.space once", asked)
	}
	// The requests user: the vault's verb is the provider's to ask (no
	// vault runs here, so no one answers; the server does not refuse it).
	if _, err := kit.AskConsumers(ctx, conn.Ask, "shelf", kit.VaultRequest{}); !errors.Is(err, kit.ErrNoVault) {
		t.Errorf("AskConsumers on the requests user = %v; want kit.ErrNoVault (no vault runs)", err)
	}
	// Another provider's consumers, and its own as another user: the
	// server refuses the subject, said at once as kit.ErrRefused (not as
	// a vault that does not answer, which a provider waits for).
	for _, ask := range []func() error{
		func() error { _, err := kit.AskConsumers(ctx, conn.Ask, "other", kit.VaultRequest{}); return err },
		func() error {
			_, err := kit.AskConsumersAs(ctx, conn.Ask, "shelf", "client-web", kit.VaultRequest{})
			return err
		},
	} {
		if err := ask(); !errors.Is(err, kit.ErrRefused) || errors.Is(err, kit.ErrNoVault) || !strings.Contains(err.Error(), "Permissions Violation") {
			t.Errorf("a vault ask the user may not publish = %v; want kit.ErrRefused with the server's violation", err)
		}
	}
}

func putJSON(t *testing.T, ctx context.Context, kv jetstream.KeyValue, key string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, key, b); err != nil {
		t.Fatal(err)
	}
}
