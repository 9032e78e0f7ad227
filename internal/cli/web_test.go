package cli

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
)

// TestWebServesThePage runs "web" against a server and loads its page: it
// answers as the user given, and its event stream is there.
func TestWebServesThePage(t *testing.T) {
	srv := bustest.Server(t)
	ctx, cancel := context.WithCancel(bustest.Context(t))
	addr := freeAddr(t)
	root := Root()
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	root.SetArgs([]string{"web", "--nats", srv.URL(), "--listen", addr, "--user", "alice"})
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := root.ExecuteContext(ctx); err != nil {
			t.Errorf("web: %v", err)
		}
	}()
	defer func() { cancel(); <-done }()
	var body string
	bustest.WaitFor(t, 0, "the page on "+addr, func() bool {
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusOK
	})
	for _, want := range []string{"answers as <b>alice</b>", `<main id="content"`, "No ask is open."} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q:\n%s", want, body)
		}
	}
}
