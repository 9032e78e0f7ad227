package cli

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/mesh-provisioner/mesh-provisioner/examples"
	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/retire"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestOnlyAnOperatorsSignatureRetires runs the seat ("serve") and the ask
// router ("router") as their own users against a server started from auth
// gen's configuration, and retires vaultwarden's keys (attacker F9). The
// router's storage user alone answers an open ask yes in mesh-asks_records,
// with the binds the record prints, first with no signature, then with the
// operator's real signature of the ask's option no: the seat refuses both,
// said, and asks anew. The operator's `answer` (its user JWT and its nkey's
// signature of the digest) retires the key, and `why` names who answered;
// the web page ("web" with the operator's credentials) answers another key
// yes, signed the same way, and it retires too.
func TestOnlyAnOperatorsSignatureRetires(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	file, err := meshfile.Parse("homelab.yaml", examples.Homelab)
	if err != nil {
		t.Fatal(err)
	}
	parties, err := access.Parties(auth.MeshOf(file, nil))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	store := filepath.Join(t.TempDir(), "js")
	if _, err := auth.Gen(dir, parties, auth.Options{StoreDir: store, Source: "homelab.yaml"}); err != nil {
		t.Fatal(err)
	}
	s, err := bus.StartServer(bus.ServerConfig{Dir: store, Listen: "127.0.0.1:0", ConfigFile: filepath.Join(dir, auth.ConfigFile)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	nats := s.URL()
	creds := func(user string) string { return auth.CredsPath(dir, user) }

	ctx, cancel := context.WithCancel(bustest.Context(t))
	var done []chan struct{}
	t.Cleanup(func() {
		cancel()
		for _, c := range done {
			<-c
		}
	})
	page := freeAddr(t)
	var webOut syncBuffer
	for _, c := range [][]string{
		{"web", "--nats", nats, "--creds", creds(access.DefaultOperator), "--listen", page, "--log-level", "error"},
		{"serve", "--nats", nats, "--creds", creds(access.SeatUser), "--log-level", "error"},
		{"router", "--nats", nats, "--creds", creds(access.RouterUser), "--log-level", "error"},
	} {
		root := Root()
		root.SetOut(io.Discard)
		if c[0] == "web" {
			root.SetOut(&webOut)
		}
		root.SetErr(io.Discard)
		root.SetArgs(c)
		d := make(chan struct{})
		done = append(done, d)
		go func() {
			defer close(d)
			if err := root.ExecuteContext(ctx); err != nil && ctx.Err() == nil {
				t.Errorf("%s: %v", c[0], err)
			}
		}()
	}
	homelab := filepath.Join(t.TempDir(), "homelab.yaml")
	without := filepath.Join(t.TempDir(), "homelab.yaml")
	if err := os.WriteFile(homelab, examples.Homelab, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(without, []byte(strings.NewReplacer(
		"ace: [gitea, vaultwarden, node-tools]", "ace: [gitea, node-tools]",
		"vaultwarden: 4a4a4a, ", "",
	).Replace(string(examples.Homelab))), 0o600); err != nil {
		t.Fatal(err)
	}
	op := []string{"--nats", nats, "--creds", creds(access.DefaultOperator)}
	key := "ace.vaultwarden.route"
	// The seat makes the buckets: apply is tried until they are there.
	bustest.WaitFor(t, 60*time.Second, "apply homelab", func() bool {
		_, _, err := run(t, append([]string{"apply", "-f", homelab, "--yes"}, op...)...)
		return err == nil
	})
	onc, ojs, err := bus.Connect(bus.Dial{URL: nats, Name: "test-operator", Creds: creds(access.DefaultOperator)})
	if err != nil {
		t.Fatal(err)
	}
	defer onc.Close()
	provisions := bus.Follow(ctx, ojs, mesh.ProvisionsBucket, bus.Options{})
	records := bus.Follow(ctx, ojs, mesh.RecordsBucket, bus.Options{})
	<-provisions.Ready()
	<-records.Ready()
	provision := func(key string) (mesh.Provision, bool) {
		it, ok := provisions.Get(key)
		var p mesh.Provision
		if ok {
			if err := json.Unmarshal(it.Value, &p); err != nil {
				t.Fatal(err)
			}
		}
		return p, ok
	}
	bustest.WaitFor(t, 60*time.Second, key+" kept", func() bool { _, ok := provision(key); return ok })
	if _, _, err := run(t, append([]string{"apply", "-f", without, "--yes"}, op...)...); err != nil {
		t.Fatal(err)
	}
	// asked waits for key to be retiring with an ask other than not and
	// returns its record.
	asked := func(key, not string) (mesh.Provision, mesh.Record) {
		t.Helper()
		var p mesh.Provision
		var rec mesh.Record
		bustest.WaitFor(t, 60*time.Second, key+" asked (not "+not+")", func() bool {
			p, _ = provision(key)
			if p.State != mesh.Retiring || p.Ask == "" || p.Ask == not || p.Warrant != nil {
				return false
			}
			it, ok := records.Get(p.Ask)
			return ok && json.Unmarshal(it.Value, &rec) == nil && rec.State == mesh.RecordOpen
		})
		return p, rec
	}

	// The router's storage user writes the record.
	rnc, rjs, err := bus.Connect(bus.Dial{URL: nats, Name: "test-router-user", Creds: creds(access.RouterUser)})
	if err != nil {
		t.Fatal(err)
	}
	defer rnc.Close()
	kv, err := rjs.KeyValue(ctx, mesh.RecordsBucket)
	if err != nil {
		t.Fatal(err)
	}
	forge := func(rec mesh.Record, by mesh.Identity) {
		t.Helper()
		yes, _ := rec.Ask.Option("yes")
		rec.State = mesh.RecordAnswered
		rec.Warrant = &mesh.RecordWarrant{Asker: rec.Ask.Asker, Ask: rec.Ask.ID, Outcome: mesh.OutcomeChosen,
			Option: "yes", Binds: yes.Binds, By: by, At: time.Now().UTC()}
		b, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, rec.Ask.ID, b); err != nil {
			t.Fatalf("the router's user writing %s: %v", rec.Ask.ID, err)
		}
	}
	operator := mesh.Identity{Who: "operator", Kind: "nats-user", Identity: "operator"}

	_, first := asked(key, "")
	forge(first, operator)
	p, second := asked(key, first.Ask.ID)
	if p.Warrant != nil {
		t.Fatalf("%s took the unsigned warrant: %+v", key, p.Warrant)
	}

	// The operator's real signature, of the option no of this ask, under yes.
	raw, err := os.ReadFile(auth.AccountCredsPath(dir, access.Requests, access.DefaultOperator))
	if err != nil {
		t.Fatal(err)
	}
	token, err := jwt.ParseDecoratedJWT(raw)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := jwt.ParseDecoratedUserNKey(raw)
	if err != nil {
		t.Fatal(err)
	}
	no, _ := second.Ask.Option("no")
	sig, err := kp.Sign([]byte(no.Binds))
	if err != nil {
		t.Fatal(err)
	}
	signed := operator
	signed.JWT, signed.Sig = token, retire.Sign(sig)
	forge(second, signed)
	p, third := asked(key, second.Ask.ID)
	if p.Warrant != nil {
		t.Fatalf("%s took the warrant signed for no: %+v", key, p.Warrant)
	}

	// The allowed neighbour: the operator's own answer.
	out, _, err := run(t, append([]string{"answer", third.Ask.ID, "yes"}, op...)...)
	if err != nil {
		t.Fatalf("answer: %v", err)
	}
	if !strings.Contains(out, "answered yes (Remove) by operator") {
		t.Errorf("answer printed %q", out)
	}
	var rec mesh.Record
	bustest.WaitFor(t, 30*time.Second, "the answered record", func() bool {
		it, _ := records.Get(third.Ask.ID)
		return json.Unmarshal(it.Value, &rec) == nil && rec.State == mesh.RecordAnswered
	})
	if w := rec.Warrant; w.By.JWT != token || w.By.Sig == "" {
		t.Errorf("the router's warrant by = %+v; want the operator's user JWT and a signature", w.By)
	}
	if err := verify(token, rec.Warrant.Binds, rec.Warrant.By.Sig); err != nil {
		t.Errorf("the warrant's signature: %v", err)
	}
	bustest.WaitFor(t, 60*time.Second, key+" retired", func() bool { _, ok := provision(key); return !ok })
	why, _, err := run(t, append([]string{"why", key}, op...)...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(why, "yes of operator") {
		t.Errorf("why %s = %q; want it to name the operator's answer yes", key, why)
	}

	// The web page answers as the operator too, signed the same way.
	db := "ace.vaultwarden.database"
	_, open := asked(db, "")
	// The operator opens the login URL the page printed; its secret is
	// kept beside the operator's credentials.
	login := waitLogin(t, &webOut)
	login.checkLoginFile(t, filepath.Join(dir, "web-login"))
	browser := login.browser(t)
	var body string
	bustest.WaitFor(t, 60*time.Second, "the page on "+page, func() bool {
		resp, err := browser.Get("http://" + page + "/")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusOK
	})
	m := regexp.MustCompile(`name="token" value="([0-9a-f]+)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no token on the page:\n%s", body)
	}
	form := url.Values{"ask": {open.Ask.ID}, "option": {"yes"}, "token": {m[1]}}
	req, _ := http.NewRequest(http.MethodPost, "http://"+page+"/answer", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://"+page)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := browser.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "answered yes by operator") {
		t.Errorf("POST /answer = %d %q; want 200, answered yes by operator", resp.StatusCode, b)
	}
	bustest.WaitFor(t, 60*time.Second, db+" retired on the page's answer", func() bool { _, ok := provision(db); return !ok })
}

// verify checks sig (by.sig) over binds with the key of the user JWT token.
func verify(token, binds, sig string) error {
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return err
	}
	pk, err := nkeys.FromPublicKey(uc.Subject)
	if err != nil {
		return err
	}
	b, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return err
	}
	return pk.Verify([]byte(binds), b)
}
