package auth_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	meshgen "github.com/mesh-provisioner/mesh-provisioner/internal/gen"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
)

// BenchmarkGen runs Gen over the parties of "gen --nodes 1000 --modules 8"
// (1 035 users): into an empty directory each op (new keys, as up's cold
// start), and again over a directory that holds them (keys kept). The
// directory is under MESH_BENCH_DIR when set (the default temporary
// directory's filesystem may be slower at making files than the one a
// data directory is on).
func BenchmarkGen(b *testing.B) {
	f, err := meshfile.Parse("gen.yaml", meshgen.Generate(1000, 8, 1))
	if err != nil {
		b.Fatal(err)
	}
	parties, err := access.Parties(auth.MeshOf(f, nil))
	if err != nil {
		b.Fatal(err)
	}
	root := os.Getenv("MESH_BENCH_DIR")
	tmp := func() string {
		d, err := os.MkdirTemp(root, "bench-gen-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(d) })
		return d
	}
	b.Run("new", func(b *testing.B) {
		defer cpu(b)()
		for b.Loop() {
			dir := tmp()
			if _, err := auth.Gen(dir, parties, auth.Options{StoreDir: filepath.Join(dir, "js")}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(parties)), "users")
	})
	b.Run("kept", func(b *testing.B) {
		dir := tmp()
		if _, err := auth.Gen(dir, parties, auth.Options{StoreDir: filepath.Join(dir, "js")}); err != nil {
			b.Fatal(err)
		}
		defer cpu(b)()
		for b.Loop() {
			if _, err := auth.Gen(dir, parties, auth.Options{StoreDir: filepath.Join(dir, "js")}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// cpu reports the process's user and system CPU per op (cpu-ms/op, and
// sys-ms/op of it) from when it is called to when the function it returns
// is: making files is mostly the kernel's work.
func cpu(b *testing.B) func() {
	var before syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	return func() {
		var after syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &after)
		ms := func(t syscall.Timeval) float64 { return float64(t.Nano()) / 1e6 }
		sys := ms(after.Stime) - ms(before.Stime)
		user := ms(after.Utime) - ms(before.Utime)
		b.ReportMetric((user+sys)/float64(b.N), "cpu-ms/op")
		b.ReportMetric(sys/float64(b.N), "sys-ms/op")
	}
}
