package auth_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/assemble"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestForeignStreamsAreRemoved is issue 18's hole 7 once it happened: an
// operator made a stream capturing a client's inbox and the vault's verbs
// before only the seat made streams, and nobody could delete it. Here such
// a stream ("capture", made on an open server and moved into the storage
// account's store, as an older version left it) and a bucket's stream
// re-made to capture another client's inbox are on the mesh's server. An
// operator may delete or narrow neither (the server refuses); the seat's
// setup, which up and the seat process run at start, removes the one and
// narrows the other to its keys, and keeps every bucket of the mesh.
func TestForeignStreamsAreRemoved(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	res, parties := gen(t, dir)

	// The stream an older version left: made where anyone could.
	openDir := t.TempDir()
	open, err := bus.StartServer(bus.ServerConfig{Dir: openDir, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	onc, err := dial(open.URL())
	if err != nil {
		t.Fatal(err)
	}
	ojs, err := jetstream.New(onc)
	if err != nil {
		t.Fatal(err)
	}
	captured := []string{access.InboxPrefix("client-n1") + ".>", "mesh-vault.>"}
	if _, err := ojs.CreateStream(ctx, jetstream.StreamConfig{Name: "capture", Subjects: captured, MaxBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	onc.Close()
	open.Shutdown()

	store := t.TempDir()
	srv, err := bus.StartServer(bus.ServerConfig{Dir: store, Listen: "127.0.0.1:0", ConfigFile: res.Config})
	if err != nil {
		t.Fatal(err)
	}
	setup := func(url string) {
		t.Helper()
		if err := (&assemble.Assembly{Dial: assemble.UsersDialer(url, dir, nil)}).MakeBuckets(ctx); err != nil {
			t.Fatalf("the seat's setup: %v", err)
		}
	}
	setup(srv.URL())
	// A bucket's stream re-made to capture another client's inbox (the
	// chained attack of hole 1, when clients made their buckets).
	f := &fixture{dir: dir, srv: srv, parties: map[string]access.Party{}, conns: map[string]*party{}}
	seat := f.connect(t, access.SeatUser, res.Creds[access.SeatUser])
	needs := "KV_" + mesh.NeedsBucket
	st, err := seat.js.Stream(ctx, needs)
	if err != nil {
		t.Fatal(err)
	}
	sc := st.CachedInfo().Config
	sc.Subjects = append(sc.Subjects, access.InboxPrefix("client-n2")+".>")
	if _, err := seat.js.UpdateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	seat.nc.Close()
	srv.Shutdown()
	accounts, err := os.ReadDir(filepath.Join(store, "jetstream"))
	if err != nil || len(accounts) != 1 {
		t.Fatalf("the store's accounts: %v, %v; want the storage account's alone", accounts, err)
	}
	from := filepath.Join(openDir, "jetstream", "$G", "streams", "capture")
	to := filepath.Join(store, "jetstream", accounts[0].Name(), "streams", "capture")
	if err := os.CopyFS(to, os.DirFS(from)); err != nil {
		t.Fatal(err)
	}

	srv, err = bus.StartServer(bus.ServerConfig{Dir: store, Listen: "127.0.0.1:0", ConfigFile: res.Config})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	f.srv = srv
	for _, p := range parties {
		f.parties[p.User] = p
	}
	seat = f.connect(t, access.SeatUser, res.Creds[access.SeatUser])
	if st, err := seat.js.Stream(ctx, "capture"); err != nil || !slices.Equal(st.CachedInfo().Config.Subjects, captured) {
		t.Fatalf("the stream left behind: %v; want it on %v", err, captured)
	}
	// An operator may neither delete it nor narrow the bucket.
	op := f.connect(t, access.DefaultOperator, res.Creds[access.DefaultOperator])
	for _, subject := range []string{"$JS.API.STREAM.DELETE.capture", "$JS.API.STREAM.UPDATE." + needs} {
		if answer, refusal := f.request(t, op, subject, []byte(`{"name":"x"}`)); refusal == "" {
			t.Errorf("the operator asks %s: answered %s; want the server's refusal", subject, answer)
		}
	}
	// The seat's setup at its next start.
	setup(srv.URL())
	if _, err := seat.js.Stream(ctx, "capture"); err == nil {
		t.Errorf("the stream capturing %v is still there after the seat's setup", captured)
	}
	st, err = seat.js.Stream(ctx, needs)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.CachedInfo().Config.Subjects, []string{"$KV." + mesh.NeedsBucket + ".>"}; !slices.Equal(got, want) {
		t.Errorf("%s captures %v after the seat's setup; want %v", needs, got, want)
	}
	for _, b := range access.Buckets() {
		if b == mesh.SeatBucket {
			continue // made by the seat process with its lease's TTL
		}
		if _, err := seat.js.Stream(ctx, "KV_"+b); err != nil {
			t.Errorf("bucket %s after the seat's setup: %v; want it kept", b, err)
		}
	}
}
