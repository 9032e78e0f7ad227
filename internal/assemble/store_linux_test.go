package assemble_test

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/examples"
	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/assemble"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// The machine up runs on a data directory whose disk is 512 MiB: its
// server's max store is what the homelab's buckets reserve
// (access.StoreReserved of its providers), said at warn since the disk
// is smaller; every bucket of the setup is made, reserving its bound;
// the providers' buckets fit up to the spare room, and the one past it is
// refused with bus.ErrStoreTooSmall naming the max_file_store to set.
func TestMachineOnASmallDiskReservesTheBuckets(t *testing.T) {
	data := bustest.SmallDisk(t, 512<<20)
	f, err := meshfile.Parse("homelab.yaml", examples.Homelab)
	if err != nil {
		t.Fatal(err)
	}
	var logged syncBuffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	ctx := bustest.Context(t)
	m, err := assemble.OpenMachine(ctx, assemble.MachineConfig{Data: assemble.Data(data), Listen: "127.0.0.1:0",
		NoAuth: true, File: f, Given: true, Log: log})
	if err != nil {
		t.Fatalf("open a machine on a disk of 512 MiB: %v", err)
	}
	defer m.Close()
	providers := assemble.Providers(f)
	if providers < 2 {
		t.Fatalf("the homelab has %d providers; want mesh-vault, postgres and more", providers)
	}
	want := access.StoreReserved(providers)
	if st := m.Server.Store(); st.MaxStore != want {
		t.Errorf("max store %d on a disk of 512 MiB; want %d, what the buckets reserve", st.MaxStore, want)
	}
	line := `level=WARN msg="assemble: the disk holding the JetStream store has less free space than the mesh's buckets reserve`
	if s := logged.String(); !strings.Contains(s, line) || !strings.Contains(s, "max_store="+bus.Size(want)) {
		t.Errorf("the machine said:\n%s\nwant %s ... max_store=%s", s, line, bus.Size(want))
	}

	if err := m.Assembly.MakeBuckets(ctx); err != nil {
		t.Fatalf("make the setup's buckets on a disk of 512 MiB: %v", err)
	}
	var made int64
	for _, b := range access.Buckets() {
		if b != mesh.SeatBucket { // made by the seat, with its lease's TTL
			n, _ := access.BucketLimits(b)
			made += n
		}
	}
	if st := m.Server.Store(); st.Reserved != made {
		t.Errorf("the setup's buckets reserve %d; want %d, their bounds' sum", st.Reserved, made)
	}
	_, js := bustest.Connect(t, m.Server, "seat")
	if _, err := bus.LeaseBucket(ctx, js, mesh.SeatBucket, time.Minute); err != nil { // as the seat makes it
		t.Fatalf("the seat's lease bucket: %v", err)
	}
	for i := range providers + access.SpareProviders {
		if _, err := bus.Bucket(ctx, js, mesh.BoundBucket(fmt.Sprintf("p%d", i)), 0); err != nil {
			t.Fatalf("provider %d's bucket of %d: %v", i+1, providers+access.SpareProviders, err)
		}
	}
	_, err = bus.Bucket(ctx, js, mesh.BoundBucket("past"), 0)
	t.Logf("past the spare room: %v", err)
	if !errors.Is(err, bus.ErrStoreTooSmall) || !strings.Contains(err.Error(), "set max_file_store: "+bus.Size(access.StoreReserved(providers+access.SpareProviders+1))) {
		t.Errorf("a provider's bucket past the spare room: %v; want bus.ErrStoreTooSmall saying max_file_store: %s",
			err, bus.Size(access.StoreReserved(providers+access.SpareProviders+1)))
	}
}
