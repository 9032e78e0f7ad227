package kit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/kit"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// A provider of "shelf" provisions on node control answers the seat's
// provisions with a handler; the kit writes each outcome as an entry in
// "shelf_bound".
func ExampleStart() {
	dir, _ := os.MkdirTemp("", "kit-example")
	defer os.RemoveAll(dir)
	s, err := bus.StartServer(bus.ServerConfig{Dir: dir, Listen: "127.0.0.1:0"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Shutdown()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The provider's own connection.
	nc, js, _ := bus.Connect(bus.Dial{URL: s.URL(), Name: "shelf"})
	defer nc.Close()
	handler := kit.Funcs{
		ProvideFunc: func(_ context.Context, key mesh.ProvisionKey, p mesh.Provision) (kit.Result, error) {
			fmt.Printf("provide %s for %s on %s\n", key, p.Consumer.Module, p.Consumer.Node)
			return kit.Provided("shelf-1", 1), nil
		},
		RetireFunc: func(_ context.Context, key mesh.ProvisionKey, _ mesh.Provision) error {
			fmt.Printf("retire %s\n", key)
			return nil
		},
	}
	k, err := kit.Start(ctx, kit.Config{Module: "shelf", Node: "control", JetStream: js, Handler: handler})
	if err != nil {
		fmt.Println(err)
		return
	}
	<-k.Ready()

	// What the seat writes (here by hand), and the entry the kit writes.
	_, sjs, _ := bus.Connect(bus.Dial{URL: s.URL(), Name: "seat"})
	provisions, _ := bus.Bucket(ctx, sjs, mesh.ProvisionsBucket, 0)
	key := mesh.ProvisionKey{Node: "ace", Consumer: "gitea", Provision: "shelf"}
	p, _ := json.Marshal(mesh.Provision{
		Provision: "shelf", State: mesh.Asked, Why: "asked of shelf on control",
		Consumer: mesh.Ref{Module: "gitea", Node: "ace"}, Provider: mesh.Ref{Module: "shelf", Node: "control"},
	})
	provisions.Put(ctx, key.String(), p)

	bound, _ := bus.Bucket(ctx, sjs, mesh.BoundBucket("shelf"), 0)
	w, _ := bound.Watch(ctx, key.String())
	defer w.Stop()
	for e := range w.Updates() {
		if e != nil {
			fmt.Printf("entry %s: %s\n", e.Key(), e.Value())
			break
		}
	}
	// Output:
	// provide ace.gitea.shelf for gitea on ace
	// entry ace.gitea.shelf: {"state":"provided","vault-name":"shelf-1","generation":1}
}
