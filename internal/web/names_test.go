package web_test

import (
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/web"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// A provision whose names are the spec's in another case (spec 2: names
// are exact) is an odd key on the page, not a provided key:
// encoding/json folded the names and showed it provided.
func TestPageShowsValuesWithNamesInAnotherCaseAsOdd(t *testing.T) {
	srv := bustest.Server(t)
	ctx := bustest.Context(t)
	_, js := bustest.Connect(t, srv, "operator")
	kv, err := bus.Bucket(ctx, js, mesh.ProvisionsBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	const key = bustest.FoldedKey
	if _, err := kv.Put(ctx, key, []byte(bustest.Folded)); err != nil {
		t.Fatal(err)
	}
	wnc, wjs := bustest.Connect(t, srv, "operator-web")
	page := web.New(ctx, web.Config{JS: wjs, NC: wnc, User: "operator"})
	<-page.Ready()
	hs := httptest.NewServer(page)
	t.Cleanup(hs.Close)
	res, err := http.Get(hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	body := html.UnescapeString(string(b))
	odd, _, _ := strings.Cut(body[strings.Index(body, `id="odd">`)+1:], "</section>")
	if !strings.Contains(body, `id="odd">`) || !strings.Contains(odd, key) ||
		!strings.Contains(odd, `not as written: the name "Provision" is not the spec's "provision"`) {
		t.Errorf("the page does not show %s as odd for its names:\n%s", key, body)
	}
}
