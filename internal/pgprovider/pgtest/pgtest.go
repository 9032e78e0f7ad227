// Package pgtest gives tests a real PostgreSQL server.
//
// [DSN] returns the server named by the environment variable
// MESH_TEST_POSTGRES_DSN (as .ci/run sets it); when it is not set, it starts
// a throwaway server with the Debian binaries (/usr/lib/postgresql/*/bin:
// initdb, pg_ctl; apt-get install -y postgresql), run as the user postgres
// when the test runs as root, in a temporary directory, on a free loopback
// port, stopped and removed in t.Cleanup. [Start] always starts a throwaway
// server, for tests that stop and start it. When neither is possible the
// test fails with one message that says how to fix it; it never skips.
//
// Servers started here let the superuser postgres in without a password and
// ask every other role for its password (scram-sha-256), so that a test can
// tell a right password from a wrong one.
package pgtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// EnvDSN is the environment variable that names a PostgreSQL server for
// the tests: a superuser (or CREATEROLE and CREATEDB) DSN.
const EnvDSN = "MESH_TEST_POSTGRES_DSN"

// HBA is the pg_hba.conf of the servers pgtest starts (and .ci/run's).
const HBA = `local all postgres trust
local all all scram-sha-256
host all postgres 127.0.0.1/32 trust
host all all 127.0.0.1/32 scram-sha-256
`

const fix = "PostgreSQL is needed: set " + EnvDSN + " to a superuser DSN of a server that asks roles for passwords, " +
	"or install the Debian binaries so the tests start their own (apt-get update && apt-get install -y postgresql)"

// DSN returns the DSN of the test server: $MESH_TEST_POSTGRES_DSN, or a
// throwaway server's (see [Start]).
func DSN(t testing.TB) string {
	t.Helper()
	if dsn := os.Getenv(EnvDSN); dsn != "" {
		return dsn
	}
	return Start(t).DSN
}

// Server is a throwaway PostgreSQL server.
type Server struct {
	// DSN connects as the superuser postgres over loopback TCP.
	DSN  string
	Port int

	bin, dir, data string
	asPostgres     bool
}

// Start starts a throwaway server for t, stopped and removed in t.Cleanup.
// It fails t with how to install PostgreSQL when the binaries are missing.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := binDir()
	if err != nil {
		t.Fatalf("pgtest: %v. %s", err, fix)
	}
	s := &Server{bin: bin, asPostgres: os.Geteuid() == 0}
	s.dir, err = os.MkdirTemp("", "mesh-pgtest-")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(s.dir) })
	if err := os.Chmod(s.dir, 0o755); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if s.asPostgres {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("pgtest: running as root, the user postgres is needed to run the server: %v. %s", err, fix)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(s.dir, uid, gid); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	s.data = filepath.Join(s.dir, "data")
	if out, err := s.run(filepath.Join(s.bin, "initdb"), "-D", s.data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"); err != nil {
		t.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}
	if out, err := s.run("sh", "-c", "cat > "+filepath.Join(s.data, "pg_hba.conf")+" <<'EOF'\n"+HBA+"EOF\n"); err != nil {
		t.Fatalf("pgtest: pg_hba.conf: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pgtest: free port: %v", err)
	}
	s.Port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	s.DSN = fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable", s.Port)
	s.Resume(t)
	t.Cleanup(func() { s.run(filepath.Join(s.bin, "pg_ctl"), "-D", s.data, "-m", "immediate", "-w", "stop") })
	return s
}

// Stop stops the server (fast shutdown), failing t when it cannot.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if out, err := s.run(filepath.Join(s.bin, "pg_ctl"), "-D", s.data, "-m", "fast", "-w", "stop"); err != nil {
		t.Fatalf("pgtest: pg_ctl stop: %v\n%s", err, out)
	}
}

// Resume starts the server again on its port, waiting until it accepts
// connections.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off", s.Port, s.dir)
	if out, err := s.run(filepath.Join(s.bin, "pg_ctl"), "-D", s.data, "-l", filepath.Join(s.dir, "log"), "-o", opts, "-w", "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "log"))
		t.Fatalf("pgtest: pg_ctl start: %v\n%s\n%s", err, out, log)
	}
}

// run runs a command, as the user postgres when the test runs as root.
func (s *Server) run(name string, args ...string) ([]byte, error) {
	var cmd *exec.Cmd
	if s.asPostgres {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
	} else {
		cmd = exec.Command(name, args...)
	}
	cmd.Dir = s.dir
	return cmd.CombinedOutput()
}

// binDir finds the directory of initdb and pg_ctl: the newest
// /usr/lib/postgresql/<version>/bin, else the one on PATH.
func binDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("no initdb in /usr/lib/postgresql/*/bin nor on PATH")
}

func version(dir string) int {
	n, _ := strconv.Atoi(strings.Split(filepath.Base(filepath.Dir(dir)), ".")[0])
	return n
}
