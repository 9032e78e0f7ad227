package web_test

import (
	"html"
	"io"
	"net/http"
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
	page := web.New(ctx, web.Config{JS: wjs, NC: wnc, User: "operator", Login: testLogin, LoginFile: testLoginFile})
	<-page.Ready()
	hs := serve(t, page)
	res, err := hs.Client().Get(hs.URL)
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
	// Its row links to its own view, which says it is odd, and why: the
	// key is on the bus, not missing.
	if !strings.Contains(odd, `href="/?key=`+key+`"`) {
		t.Errorf("the odd row of %s has no link to its view:\n%s", key, odd)
	}
	res, err = hs.Client().Get(hs.URL + "/?key=" + key)
	if err != nil {
		t.Fatal(err)
	}
	b, err = io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	body = html.UnescapeString(string(b))
	if res.StatusCode != http.StatusOK || strings.Contains(body, "No such key") ||
		!strings.Contains(body, "Odd in "+mesh.ProvisionsBucket+`: not as written: the name "Provision" is not the spec's "provision"`) {
		t.Errorf("/?key=%s = %d; want 200 saying it is odd in %s, and why:\n%s", key, res.StatusCode, mesh.ProvisionsBucket, body)
	}
}
