package assemble

import (
	"context"
	"log/slog"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/lockfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/pgprovider"
)

// MachineConfig configures [OpenMachine]: a whole mesh on one machine
// (up), its state in a data directory.
type MachineConfig struct {
	// Data is the data directory (up's --data).
	Data Data
	// Listen is the embedded server's address (port 0 picks a free one).
	Listen string
	// NoAuth runs the server without users: anyone who reaches it may
	// do anything.
	NoAuth bool
	// File is the mesh file given, or the bundled example when none was;
	// Source names it in the users' configuration.
	File   *meshfile.File
	Source string
	// Given says File was given: with none, the data directory's users
	// run as they are ([Data.PrepareUsers]) and its kept mesh name must
	// read.
	Given bool
	// Clients says node clients run (as decided so far): without them
	// their credentials files are written later.
	Clients bool
	// Log receives what the machine's components say. Nil means
	// slog.Default().
	Log *slog.Logger
}

// Machine is a mesh running on one machine from a data directory: the
// directory locked, its users made, its embedded NATS server started, and
// an [Assembly] whose components dial that server each as its own user
// (or all alike, without users). Close stops the server and releases the
// lock, after the assembly's components have stopped.
type Machine struct {
	Data Data
	// Stored is the mesh name the directory kept ("" for none), and
	// StoredErr why it could not be read with a file given (the file's
	// name replaces it).
	Stored    string
	StoredErr error
	// Users are the server's users; with NoAuth, none (Written returns
	// nil at once).
	Users  *ServerUsers
	Server *bus.Server
	// Assembly starts the machine's components on Server.
	Assembly *Assembly

	noAuth bool
	lock   *lockfile.Lock
}

// OpenMachine locks cfg.Data ([Data.Lock]), reads the mesh name it kept,
// makes its users ([Data.PrepareUsers]; those due renewed at once and then
// every [RenewEvery] until ctx is done) and starts the embedded server on
// cfg.Listen with them. On an error what it took is given back.
func OpenMachine(ctx context.Context, cfg MachineConfig) (m *Machine, err error) {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	lock, err := cfg.Data.Lock()
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			lock.Release()
		}
	}()
	// A store run in the other mode holds a mesh this server would not
	// see: refused before anything is written.
	if err := cfg.Data.CheckMode(cfg.NoAuth); err != nil {
		return nil, err
	}
	m = &Machine{Data: cfg.Data, noAuth: cfg.NoAuth, lock: lock}
	// The name of the mesh the data holds, kept by the up that applied
	// it: a restart with no file runs under it.
	if m.Stored, err = cfg.Data.MeshName(); err != nil {
		if !cfg.Given {
			return nil, err
		}
		m.StoredErr, m.Stored, err = err, "", nil
	}
	reserved := access.StoreReserved(Providers(cfg.File))
	sc := bus.ServerConfig{Dir: cfg.Data.Store(), Listen: cfg.Listen, MinStore: reserved}
	m.Users = &ServerUsers{Written: func() error { return nil }}
	if !cfg.NoAuth {
		// With no file, the data directory's users as they are (made
		// from the file it last ran with), never the bundled example's.
		if m.Users, err = cfg.Data.PrepareUsers(cfg.File, cfg.Source, !cfg.Given, cfg.Clients); err != nil {
			return nil, err
		}
		sc.ConfigFile = m.Users.Config
		// Users whose JWTs expire soon (or did, while the machine was
		// stopped) are renewed before any component connects, and then
		// while it runs.
		if _, err := m.Users.Authority.Renew(); err != nil {
			return nil, err
		}
		go KeepRenewed(ctx, m.Users.Authority, log)
	}
	if m.Server, err = bus.StartServer(sc); err != nil {
		return nil, err
	}
	sayStore(log, m.Server.Store(), reserved)
	dial := Shared(m.Server.URL(), "", log)
	if !cfg.NoAuth {
		dial = UsersDialer(m.Server.URL(), cfg.Data.Auth(), log)
	}
	m.Assembly = &Assembly{Dial: dial, Log: log, Issues: !cfg.NoAuth}
	return m, nil
}

// Providers returns how many modules of f provide (each has a bucket of
// entries, [mesh.BoundBucket]); 0 for a nil f.
func Providers(f *meshfile.File) int {
	if f == nil {
		return 0
	}
	n := 0
	for i := range f.Modules {
		for _, b := range f.Modules[i].Builds {
			if b.Manifest != nil && len(b.Manifest.Provides) > 0 {
				n++
				break
			}
		}
	}
	return n
}

// sayStore says at info the embedded server's JetStream store: its max
// store, what the mesh's buckets reserve of it (reserved:
// [access.StoreReserved]) and the disk's free space; at warn when the
// disk's free space is below what the buckets may still take (reserved
// less what the store holds): each bucket is then bounded, but a disk
// that fills refuses every bucket's writes, not only a full bucket's
// (docs/trust.md).
func sayStore(log *slog.Logger, st bus.Store, reserved int64) {
	args := []any{"max_store", bus.Size(st.MaxStore), "buckets_reserve", bus.Size(reserved),
		"spare_providers", access.SpareProviders, "holds", bus.Size(st.Used), "disk_free", bus.Size(st.Free)}
	if st.Free >= 0 && st.Free < reserved-st.Used {
		log.Warn("assemble: the disk holding the JetStream store has less free space than the mesh's buckets reserve: "+
			"a bucket filling the disk refuses every other bucket's writes too, until space is freed", args...)
		return
	}
	log.Info("assemble: JetStream store", args...)
}

// Close stops the server and releases the data directory's lock. Call it
// once the assembly's components have stopped ([Assembly.Wait]).
func (m *Machine) Close() {
	m.Server.Shutdown()
	m.lock.Release()
}

// Creds returns the credentials file of user, "" without users.
func (m *Machine) Creds(user string) string {
	if m.noAuth {
		return ""
	}
	return m.Data.Creds(user)
}

// MeshConfig returns the configuration of the machine's mesh
// ([Assembly.StartMesh]) as decided by d: node clients under
// DATA/nodes/<node> when d says they run, each vault's store under
// DATA/vault/<node> (moved with mesh-vault to the node it is placed on
// next: [Data.MoveVault]), the postgres provider when postgres (its DSN) is
// given, naming its roles and databases after d's mesh name, and, with
// users, the live mesh's users issued in DATA/auth. The caller sets what
// is said (the seat's OnResult, the follower's Said) and metrics.
func (m *Machine) MeshConfig(d Decision, postgres string) MeshConfig {
	cfg := MeshConfig{
		Follow: FollowConfig{
			Runs:       Runs{Clients: d.Clients, Postgres: postgres != ""},
			ClientRoot: m.Data.ClientRoot,
			VaultDir:   m.Data.Vault,
			MoveVault:  m.Data.MoveVault,
			Postgres:   pgprovider.Config{DSN: postgres, Mesh: d.Name, OneMachine: true},
		},
	}
	if !m.noAuth {
		cfg.Follow.Users = &GenUsers{Dir: m.Data.Auth(), StoreDir: m.Data.Store(), URL: m.Server.URL(),
			Before: m.Users.Written, Log: m.Assembly.log()}
	}
	return cfg
}
