package assemble

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/lockfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/vault"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Files and folders of a [Data] directory.
const (
	// AuthDir holds the mesh's bus users: the server's configuration, the
	// keys, and one credentials file per party (what "auth gen" writes).
	AuthDir = "auth"
	// StoreDir is the embedded server's JetStream store.
	StoreDir = "nats"
	// NodesDir holds each node client's root folder, NodesDir/<node>.
	NodesDir = "nodes"
	// VaultDir holds each vault's store, VaultDir/<node>.
	VaultDir = "vault"
	// DataLock is the file a process running the mesh holds an exclusive
	// lock on (flock) for its whole life, with its pid in it: two
	// processes never share one JetStream store.
	DataLock = "lock"
	// MeshNameFile holds the name of the mesh the directory holds (one
	// line), for a restart with no file: written when a mesh is applied
	// (removed when that mesh has no name). "apply -f" never touches it:
	// the name is the runner's configuration, never a bus value.
	MeshNameFile = "mesh-name"
)

// Data is a data directory (up's --data): where a mesh run on one machine
// keeps its state. Its methods say where each part lives.
type Data string

// Store returns the JetStream store directory, DATA/nats.
func (d Data) Store() string { return filepath.Join(string(d), StoreDir) }

// Auth returns the users' directory, DATA/auth.
func (d Data) Auth() string { return filepath.Join(string(d), AuthDir) }

// ClientRoot returns the root folder of node's client, DATA/nodes/<node>.
func (d Data) ClientRoot(node string) string { return filepath.Join(string(d), NodesDir, node) }

// Vault returns the store of the vault on node, DATA/vault/<node>.
func (d Data) Vault(node string) string { return filepath.Join(string(d), VaultDir, node) }

// MoveVault keeps the vault's store with mesh-vault when it moves between
// the nodes of one machine: when DATA/vault/<to> holds no value (no store,
// or an empty one) and another node's DATA/vault/<node> does, the one
// whose store was written last is renamed to DATA/vault/<to>, its key
// with it, and that node is returned ("" when nothing moved). What
// DATA/vault/<to> held (a key that sealed nothing, an empty store) is
// removed first; anything else in it is an error naming it, and nothing
// moves. Call it only while no vault runs on this machine's stores.
func (d Data) MoveVault(to string) (from string, err error) {
	target := d.Vault(to)
	if holdsValues(target) {
		return "", nil
	}
	entries, err := os.ReadDir(filepath.Join(string(d), VaultDir))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("vault stores: %w", err)
	}
	var newest time.Time
	for _, e := range entries {
		if !e.IsDir() || e.Name() == to || !mesh.ValidName(e.Name()) {
			continue
		}
		st, err := os.Stat(filepath.Join(string(d), VaultDir, e.Name(), vault.StoreFile))
		if err != nil || st.Size() == 0 {
			continue
		}
		if from == "" || st.ModTime().After(newest) {
			from, newest = e.Name(), st.ModTime()
		}
	}
	if from == "" {
		return "", nil
	}
	if left, err := os.ReadDir(target); err == nil {
		for _, e := range left {
			if e.Name() != vault.KeyFile && e.Name() != vault.StoreFile {
				return "", fmt.Errorf("the vault's store cannot move from %s to %s: %s holds %s, which is no vault's", d.Vault(from), target, target, e.Name())
			}
		}
		if err := os.RemoveAll(target); err != nil {
			return "", fmt.Errorf("the vault's store cannot move to %s: %w", target, err)
		}
	}
	if err := os.Rename(d.Vault(from), target); err != nil {
		return "", fmt.Errorf("the vault's store cannot move to %s: %w", target, err)
	}
	return from, nil
}

// holdsValues reports whether the vault store in dir holds a record.
func holdsValues(dir string) bool {
	st, err := os.Stat(filepath.Join(dir, vault.StoreFile))
	return err == nil && st.Size() > 0
}

// Creds returns the credentials file of user, DATA/auth/<user>.creds.
func (d Data) Creds(user string) string { return auth.CredsPath(d.Auth(), user) }

// Lock creates the directory (mode 0700) and takes the lock on
// DATA/[DataLock]; another process holding it fails at once, naming the
// directory and its pid. A directory others may write, or any file or
// directory under it but the nodes' roots (DATA/[NodesDir], what the
// clients render), is refused ([auth.CheckTree]).
func (d Data) Lock() (*lockfile.Lock, error) {
	// Another local user who may write the data directory, or a file in
	// it, could replace or change the server's configuration, a key, a
	// party's credentials, the JetStream store or a vault's store.
	if err := auth.CheckTree(string(d), NodesDir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(string(d), 0o700); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	l, err := lockfile.Take(filepath.Join(string(d), DataLock))
	var held *lockfile.HeldError
	if errors.As(err, &held) {
		if held.PID == 0 {
			return nil, fmt.Errorf("%s is in use by another up", d)
		}
		return nil, fmt.Errorf("%s is in use by another up (pid %d)", d, held.PID)
	}
	return l, err
}

// MeshName returns the name DATA/[MeshNameFile] holds, "" when there is no
// such file. A file that holds no valid name is an error naming it.
func (d Data) MeshName() (string, error) {
	path := filepath.Join(string(d), MeshNameFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	name := strings.TrimSpace(string(b))
	if !mesh.ValidName(name) {
		return "", fmt.Errorf("%s holds %q, not a mesh's name (lower-case [a-z0-9][a-z0-9-]*): write the mesh's name in it, or remove it and run \"up MESHFILE\"", path, name)
	}
	return name, nil
}

// KeepMeshName keeps name in DATA/[MeshNameFile] (mode 0600, replaced
// whole by a rename), or removes that file when name is "".
func (d Data) KeepMeshName(name string) error {
	path := filepath.Join(string(d), MeshNameFile)
	if name == "" {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(name+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ServerUsers are the users a mesh's embedded server runs with, made
// before it starts ([Data.PrepareUsers]).
type ServerUsers struct {
	// Config is the server's configuration file (DATA/auth/nats-server.conf).
	Config string
	// Kept says the directory's users run as they were (no file given).
	Kept bool
	// Mended lists the users whose credentials files an earlier run left
	// unwritten (it stopped first), written now; sorted.
	Mended []string
	// Later says some credentials files (the node clients', when none
	// runs) are written after PrepareUsers returns: Written waits for
	// them.
	Later bool
	// Authority signs, renews and revokes the users of DATA/auth.
	Authority *auth.Authority
	// Written returns once the files left for later are written, with the
	// first error writing one; nil at once when none was left. Safe to
	// call again and concurrently.
	Written func() error
}

// PrepareUsers makes the bus users the embedded server runs with, in
// DATA/auth. With keep (no mesh file was given) and a configuration there,
// the directory's users run as they are (the credentials files an earlier
// run left unwritten written now: [auth.Mend]); else they are made from
// file's parties ([auth.Gen], keys kept across runs), source naming the
// file in the configuration. Without clients (no node client runs) the
// node clients' files are written after it returns (see
// [ServerUsers.Written]), as nothing reads them before.
func (d Data) PrepareUsers(file *meshfile.File, source string, keep, clients bool) (*ServerUsers, error) {
	existing := filepath.Join(d.Auth(), auth.ConfigFile)
	if _, err := os.Stat(existing); keep && err == nil {
		a, err := auth.Open(d.Auth(), auth.Options{})
		if err != nil {
			return nil, err
		}
		mended, err := auth.Mend(d.Auth())
		if err != nil {
			return nil, err
		}
		return &ServerUsers{Config: existing, Kept: true, Mended: mended, Authority: a, Written: func() error { return nil }}, nil
	}
	parties, err := access.Parties(auth.MeshOf(file, nil))
	if err != nil {
		return nil, err
	}
	opts := auth.Options{StoreDir: d.Store(), Source: source}
	if !clients {
		later := map[string]bool{}
		for _, p := range parties {
			if p.Has(access.Client) {
				later[p.User] = true
			}
		}
		opts.Later = func(user string) bool { return later[user] }
	}
	res, err := auth.Gen(d.Auth(), parties, opts)
	if err != nil {
		return nil, err
	}
	go res.WriteLater()
	return &ServerUsers{Config: res.Config, Later: opts.Later != nil, Authority: res.Authority, Written: res.WriteLater}, nil
}

// HaveUsers returns an error naming the first party of file that has no
// credentials file in DATA/auth, nil when every one has.
func (d Data) HaveUsers(file *meshfile.File) error {
	parties, err := access.Parties(auth.MeshOf(file, nil))
	if err != nil {
		return err
	}
	for _, p := range parties {
		path := d.Creds(p.User)
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("no %s", path)
		}
	}
	return nil
}
