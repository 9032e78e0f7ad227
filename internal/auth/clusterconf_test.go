package auth_test

import (
	"os"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
)

// TestClusterMonitoringStaysOnLoopback checks that a server of a cluster
// "auth gen --cluster" writes listens for clients and routes on its
// network address but serves monitoring on loopback only (of its address's
// family): monitoring answers without credentials and lists every user's
// key, every consumer and its deliver subject, which a node's client must
// not learn of another's.
func TestClusterMonitoringStaysOnLoopback(t *testing.T) {
	dir := t.TempDir()
	c := auth.Cluster{Name: "mesh", Servers: []auth.Server{{Name: "n1", Host: "10.0.0.1"}, {Name: "n2", Host: "fd00::2"}, {Name: "n3", Host: "10.0.0.3"}}}
	paths, err := c.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{
		"n1": {"listen: 10.0.0.1:4222", "http: 127.0.0.1:8222"},
		"n2": {"listen: [fd00::2]:4222", "http: [::1]:8222"},
		"n3": {"listen: 10.0.0.3:4222", "http: 127.0.0.1:8222"},
	}
	if len(paths) != len(want) {
		t.Fatalf("Write wrote %v; want a configuration per server", paths)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		conf := string(b)
		name := ""
		for n := range want {
			if strings.Contains(conf, "server_name: "+n+"\n") {
				name = n
			}
		}
		w, ok := want[name]
		if !ok {
			t.Fatalf("%s names no server of the cluster:\n%s", p, conf)
		}
		for _, line := range w {
			if !strings.Contains(conf, "\n"+line+"\n") {
				t.Errorf("%s lacks the line %q:\n%s", p, line, conf)
			}
		}
		if strings.Contains(conf, "http: 10.") || strings.Contains(conf, "http: [fd00") {
			t.Errorf("%s serves monitoring on the network address:\n%s", p, conf)
		}
	}
}
