package assemble

import (
	"fmt"
	"os"
	"path/filepath"
)

// globalAccount is the account nats-server keeps a server without users in:
// its JetStream store lives in DATA/nats/jetstream/$G, while a server with
// users keeps each account's under its public key.
const globalAccount = "$G"

// accountStreams returns the accounts whose JetStream store under the
// embedded server's store directory (store, DATA/nats) holds a stream,
// each with its folder: nats-server keeps an account's streams in
// store/jetstream/<account>/streams/<stream>.
func accountStreams(store string) map[string]string {
	root := filepath.Join(store, "jetstream")
	accounts, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	held := map[string]string{}
	for _, a := range accounts {
		if !a.IsDir() {
			continue
		}
		dir := filepath.Join(root, a.Name())
		if streams, err := os.ReadDir(filepath.Join(dir, "streams")); err == nil && len(streams) > 0 {
			held[a.Name()] = dir
		}
	}
	return held
}

// CheckMode returns an error wrapping [ErrUsage] when the data directory's
// store holds a mesh run in the other mode: without users (up --no-auth)
// its buckets live in the server's global account, with users in the mesh's
// account, so a run in the other mode sees none of them and would start a
// second mesh in the directory (the bundled example applied, the kept name
// and the vault's store taken from the first). A restart never changes the
// mesh: the error says to run it as it was, or to give the mode its own
// data directory. noAuth is the mode of this run. It reads only the store's
// folders, before the server starts.
func (d Data) CheckMode(noAuth bool) error {
	held := accountStreams(d.Store())
	open, openHeld := held[globalAccount]
	delete(held, globalAccount)
	switch {
	case noAuth && len(held) > 0:
		return usage{fmt.Errorf("--no-auth: %s holds a mesh run with users (its buckets are in %s), which a server without users does not see: "+
			"run \"up\" without --no-auth to run it, or give --data another directory for a mesh without users", d, someDir(held))}
	case !noAuth && openHeld:
		return usage{fmt.Errorf("%s holds a mesh run without users (up --no-auth; its buckets are in %s), which a server with users does not see: "+
			"run \"up --no-auth\" to run it, or give --data another directory for a mesh with users", d, open)}
	}
	return nil
}

// someDir is one of dirs' folders, the first by account.
func someDir(dirs map[string]string) string {
	first := ""
	for a := range dirs {
		if first == "" || a < first {
			first = a
		}
	}
	return dirs[first]
}
