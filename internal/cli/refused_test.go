package cli

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/assemble"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestPermissionRefusalIsSaid runs commands against a server made by auth
// gen as a node's client, which may read only its node's keys: get of its
// node's refusals (a bucket it may not read; an operator's command such as
// asks stops before it connects, see
// TestOperatorCommandsRefuseAnotherPartysCreds) fails with the server's
// refusal said as such, naming the user, the subject and --creds (not a
// deadline passed); the allowed neighbour, get provisions --node ace as
// ace's client, works.
func TestPermissionRefusalIsSaid(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "auth")
	if _, _, err := run(t, "auth", "gen", "-f", homelabFile, "-o", dir); err != nil {
		t.Fatalf("auth gen: %v", err)
	}
	s, err := bus.StartServer(bus.ServerConfig{Dir: t.TempDir(), Listen: "127.0.0.1:0", ConfigFile: filepath.Join(dir, auth.ConfigFile)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	operator, ace := auth.CredsPath(dir, "operator"), auth.CredsPath(dir, "client-ace")
	// The seat alone makes the buckets, as its setup does.
	if err := (&assemble.Assembly{Dial: assemble.UsersDialer(s.URL(), dir, nil)}).MakeBuckets(bustest.Context(t)); err != nil {
		t.Fatal(err)
	}
	if _, errOut, err := run(t, "apply", "-f", homelabFile, "--yes", "--nats", s.URL(), "--creds", operator); err != nil {
		t.Fatalf("apply as the operator: %v (%s)", err, errOut)
	}
	nc, err := nats.Connect(s.URL(), nats.UserCredentials(operator), nats.CustomInboxPrefix("_INBOX_operator"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.Bucket(bustest.Context(t), js, mesh.ProvisionsBucket, 0); err != nil {
		t.Fatal(err)
	}
	// The seat makes the client's watches' consumers.
	bustest.ServeWatchesAs(t, s.URL(), auth.CredsPath(dir, access.SeatUser))
	if out, errOut, err := run(t, "get", "provisions", "--node", "ace", "--nats", s.URL(), "--creds", ace); err != nil {
		t.Errorf("get provisions --node ace as ace's client = %q, %v (%s); want it allowed", out, err, errOut)
	}
	for _, args := range [][]string{{"get", "refused", "--node", "ace"}} {
		_, _, err := run(t, append(args, "--nats", s.URL(), "--creds", ace)...)
		var refused *refusedError
		if !errors.As(err, &refused) || !errors.Is(err, nats.ErrPermissionViolation) {
			t.Errorf("%v as ace's client = %v; want the server's refusal", args, err)
			continue
		}
		for _, want := range []string{"the NATS server refused the user client-ace (" + ace + ")", "--creds FILE", "docs/trust.md"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%v as ace's client: %q; want it to say %q", args, err, want)
			}
		}
		if strings.Contains(err.Error(), "deadline") {
			t.Errorf("%v as ace's client: %q waited for a deadline", args, err)
		}
	}
}
