package kittest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/kit/kittest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

var (
	shelf = mesh.Ref{Module: "shelf", Node: "control"}
	gitea = mesh.Ref{Module: "gitea", Node: "ace"}
)

func put(t *testing.T, url, bucket, key, value string) {
	t.Helper()
	_, js := kittest.Connect(t, url, "writer")
	ctx := context.Background()
	kv, err := bus.Bucket(ctx, js, bucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, key, []byte(value)); err != nil {
		t.Fatal(err)
	}
}

// The test seat reads names exactly, as the seat does (spec 2): a
// provider's entry {"STATE":"provided",..} says no state, so its key stays
// asked, saying so; the same entry with the spec's names is provided.
// encoding/json folded the names, and the test seat took the first as
// provided where the seat does not.
func TestJudgeReadsEntryNamesExactly(t *testing.T) {
	url := kittest.Server(t)
	seat := kittest.NewSeat(t, url)
	seat.Judge(shelf.Module)
	key, p := kittest.Requirement(gitea, "shelf", "", shelf)
	seat.Need(key, p)
	put(t, url, mesh.BoundBucket(shelf.Module), key.String(), `{"STATE":"provided","VAULT-NAME":"x","GENERATION":3}`)
	why := `the entry of shelf says state "", which is not provided, failed or waits: `
	bustest.WaitFor(t, 0, fmt.Sprintf("%s asked: %s", key, why), func() bool {
		got, ok := seat.Get(key)
		if ok && got.State == mesh.Provided {
			t.Fatalf("%s = %+v; want asked (the entry names no state)", key, got)
		}
		return ok && got.State == mesh.Asked && strings.HasPrefix(got.Why, why)
	})
	put(t, url, mesh.BoundBucket(shelf.Module), key.String(), `{"state":"provided","vault-name":"x","generation":3}`)
	bustest.WaitFor(t, 0, key.String()+" provided as x, 3", func() bool {
		got, ok := seat.Get(key)
		return ok && got.State == mesh.Provided && got.Reference != nil && *got.Reference == (mesh.Reference{ID: "x", Generation: 3})
	})
}

// A provision whose names are the spec's in another case is read with
// those names unread: "STATE" is no state, and "PROVIDER" no provider.
func TestSeatGetReadsNamesExactly(t *testing.T) {
	url := kittest.Server(t)
	seat := kittest.NewSeat(t, url)
	key, _ := kittest.Requirement(gitea, "shelf", "", shelf)
	put(t, url, mesh.ProvisionsBucket, key.String(),
		`{"provision":"shelf","consumer":{"module":"gitea","node":"ace"},"PROVIDER":{"module":"shelf","node":"control"},"STATE":"provided"}`)
	var got mesh.Provision
	bustest.WaitFor(t, 0, key.String()+" in the test seat's copy", func() bool {
		var ok bool
		got, ok = seat.Get(key)
		return ok
	})
	if got.Provision != "shelf" || got.Consumer != gitea || got.Provider != (mesh.Ref{}) || got.State != "" {
		t.Errorf("Get(%s) = %+v; want shelf for gitea on ace, no provider, no state", key, got)
	}
}
