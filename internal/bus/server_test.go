package bus_test

import (
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
)

// A listen address another process holds fails at once with an error
// naming it, not after the server's wait for readiness.
func TestStartServerRefusesAnAddressInUse(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	s, err := bus.StartServer(bus.ServerConfig{Dir: t.TempDir(), Listen: addr})
	if err == nil {
		s.Shutdown()
		t.Fatalf("StartServer on %s, which is in use = nil error; want it refused", addr)
	}
	if !errors.Is(err, bus.ErrAddressInUse) || !strings.Contains(err.Error(), "bus: cannot listen on "+addr+": address in use") {
		t.Errorf("StartServer on %s, which is in use = %q; want ErrAddressInUse naming the address", addr, err)
	}

	// Freed, the same address serves.
	ln.Close()
	s, err = bus.StartServer(bus.ServerConfig{Dir: t.TempDir(), Listen: addr})
	if err != nil {
		t.Fatalf("StartServer on the freed %s = %v", addr, err)
	}
	defer s.Shutdown()
	if want := "nats://" + addr; s.URL() != want {
		t.Errorf("URL = %s; want %s", s.URL(), want)
	}
}
