package web_test

import (
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/web"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// testLogin is the login secret the tests' pages are given, and
// testLoginFile where they say it lives.
var testLogin = strings.Repeat("5e", 32)

const testLoginFile = "/home/operator/.local/state/mesh-provisioner/web-login"

// serve serves page on loopback and logs its test client (hs.Client(),
// given a cookie jar) in with the page's login URL, as the operator's
// browser does. The server and its event streams end with the test.
func serve(t testing.TB, page *web.Page) *httptest.Server {
	t.Helper()
	hs := httptest.NewServer(page)
	t.Cleanup(func() {
		hs.CloseClientConnections() // a browser's event stream
		hs.Close()
	})
	c := hs.Client()
	c.Jar = newJar(t)
	resp, err := c.Get(hs.URL + "/?login=" + testLogin)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("logging in to %s = %d; want the page after the login's redirect", hs.URL, resp.StatusCode)
	}
	return hs
}

func newJar(t testing.TB) *cookiejar.Jar {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return jar
}

// login opens the page's login URL in a browser's tab, as the operator
// does with the URL the page printed.
func login(base string) chromedp.Action[chromedp.Void] {
	return chromedp.Navigate(base + "/?login=" + testLogin)
}

// TestPageAnswersOnlyTheLoggedIn tries the page as another local user
// would, who reaches its loopback port but cannot read the login file:
// every route (the page, a drill-down, the event stream, the assets, an
// answer) without a session is refused 401 saying where the secret lives,
// and shows no key nor the answer's token; a wrong or empty login secret
// is refused 403 and sets no cookie; a forged session cookie is refused
// 401; an answer carrying the page's token (as if it had leaked) without
// the session is refused 401 and the ask stays open; a Host other than the
// address listened on (a rebound name, another port) is refused 421 even
// to the logged-in browser and with the login. The allowed neighbour: the
// operator's browser opens the login URL, gets an HttpOnly,
// SameSite=Strict cookie and a redirect to the URL without the secret,
// sees the page (and on localhost), and answers yes to the ask, which the
// router records answered by the operator.
func TestPageAnswersOnlyTheLoggedIn(t *testing.T) {
	r := start(t)
	r.apply(withoutVaultwarden(t))
	r.settle()
	var p mesh.Provision
	bustest.WaitFor(t, 0, "an ask", func() bool {
		return r.get(mesh.ProvisionsBucket, "ace.vaultwarden.database", &p) && p.Ask != ""
	})
	good := token(t, r.client, r.url)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(r.url, "http://"))

	// noFollow is a browser of its own (another local user's) that shows
	// each answer as it comes, redirects too.
	noFollow := func() *http.Client {
		return &http.Client{Jar: newJar(t), Timeout: 30 * time.Second, // an event stream let through ends
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	do := func(c *http.Client, method, path, host string, form url.Values, cookie *http.Cookie) (*http.Response, string) {
		t.Helper()
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, _ := http.NewRequest(method, r.url+path, body)
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Origin", r.url)
			req.Header.Set("Sec-Fetch-Site", "same-origin")
		}
		if host != "" {
			req.Host = host
			req.Header.Set("Origin", "http://"+host)
		}
		if cookie != nil {
			req.AddCookie(cookie)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body) // an event stream: what came before the timeout
		resp.Body.Close()
		return resp, string(b)
	}
	answer := url.Values{"ask": {p.Ask}, "option": {"yes"}, "token": {good}}
	forged := &http.Cookie{Name: "mesh-web-" + port, Value: strings.Repeat("ab", 32)}
	// session is the operator's browser's cookie: a request on another
	// Host is refused even with it.
	base, _ := url.Parse(r.url)
	jarred := r.client.Jar.Cookies(base)
	if len(jarred) != 1 {
		t.Fatalf("the logged-in client holds cookies %v; want its session's", jarred)
	}
	session := jarred[0]
	for _, c := range []struct {
		name, method, path, host string
		form                     url.Values
		cookie                   *http.Cookie
		client                   *http.Client
		want                     int
		says                     string
	}{
		{"the page without a session", http.MethodGet, "/", "", nil, nil, noFollow(), http.StatusUnauthorized, "log in first"},
		{"a key without a session", http.MethodGet, "/?key=ace.vaultwarden.database", "", nil, nil, noFollow(), http.StatusUnauthorized, testLoginFile},
		{"the events without a session", http.MethodGet, "/events?v=0", "", nil, nil, noFollow(), http.StatusUnauthorized, testLoginFile},
		{"the assets without a session", http.MethodGet, "/assets/page.js", "", nil, nil, noFollow(), http.StatusUnauthorized, testLoginFile},
		{"an answer without a session", http.MethodPost, "/answer", "", answer, nil, noFollow(), http.StatusUnauthorized, testLoginFile},
		{"an answer with a forged session", http.MethodPost, "/answer", "", answer, forged, noFollow(), http.StatusUnauthorized, "log in first"},
		{"the page with a forged session", http.MethodGet, "/", "", nil, forged, noFollow(), http.StatusUnauthorized, "log in first"},
		{"a wrong login", http.MethodGet, "/?login=" + strings.Repeat("0", len(testLogin)), "", nil, nil, noFollow(), http.StatusForbidden, "the login secret is wrong"},
		{"the login cut short", http.MethodGet, "/?login=" + testLogin[:len(testLogin)-1], "", nil, nil, noFollow(), http.StatusForbidden, testLoginFile},
		{"an empty login", http.MethodGet, "/?login=", "", nil, nil, noFollow(), http.StatusForbidden, "the login secret is wrong"},
		{"a rebound name, with the session", http.MethodGet, "/", "evil.example:" + port, nil, session, noFollow(), http.StatusMisdirectedRequest, "is not this page's"},
		{"a rebound name's answer, with the session", http.MethodPost, "/answer", "evil.example:" + port, answer, session, noFollow(), http.StatusMisdirectedRequest, "is not this page's"},
		{"a rebound name with the login", http.MethodGet, "/?login=" + testLogin, "evil.example:" + port, nil, nil, noFollow(), http.StatusMisdirectedRequest, "DNS rebinding"},
		{"another port, with the session", http.MethodGet, "/", "127.0.0.1:1", nil, session, noFollow(), http.StatusMisdirectedRequest, "is not this page's"},
		{"another address, with the session", http.MethodGet, "/", "127.0.0.2:" + port, nil, session, noFollow(), http.StatusMisdirectedRequest, "is not this page's"},
	} {
		resp, body := do(c.client, c.method, c.path, c.host, c.form, c.cookie)
		if resp.StatusCode != c.want || !strings.Contains(body, c.says) {
			t.Errorf("%s: %s %s = %d %q; want %d saying %q", c.name, c.method, c.path, resp.StatusCode, body, c.want, c.says)
		}
		if strings.Contains(body, good) || strings.Contains(body, "ace.") {
			t.Errorf("%s: the refusal shows the token or a key:\n%s", c.name, body)
		}
		if len(resp.Cookies()) != 0 {
			t.Errorf("%s: the refusal sets cookies %v; want none", c.name, resp.Cookies())
		}
	}
	var rec mesh.Record
	if !r.get(mesh.RecordsBucket, p.Ask, &rec) || rec.State != mesh.RecordOpen {
		t.Fatalf("record %s = %+v after the refused answers; want still open", p.Ask, rec)
	}

	// The operator's browser: the login URL with a view's query sets the
	// session cookie and redirects to the view without the secret.
	op := noFollow()
	resp, _ := do(op, http.MethodGet, "/?node=ace&login="+testLogin, "", nil, nil)
	if to := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || to != "/?node=ace" {
		t.Errorf("the login URL = %d to %q; want 303 to /?node=ace", resp.StatusCode, to)
	}
	cs := resp.Cookies()
	if len(cs) != 1 || cs[0].Name != "mesh-web-"+port || !cs[0].HttpOnly || cs[0].SameSite != http.SameSiteStrictMode || cs[0].Path != "/" || len(cs[0].Value) != 64 {
		t.Errorf("the login set cookies %v; want one mesh-web-%s, HttpOnly, SameSite=Strict, Path=/, 64 hex digits", cs, port)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("the login's Cache-Control = %q; want no-store", cc)
	}
	resp, body := do(op, http.MethodGet, "/?node=ace", "", nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "ace.vaultwarden.database") {
		t.Errorf("the operator's browser after the login: GET /?node=ace = %d; want 200 with ace's keys", resp.StatusCode)
	}
	if resp, _ := do(op, http.MethodGet, "/assets/page.js", "", nil, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("the operator's browser: GET /assets/page.js = %d; want 200", resp.StatusCode)
	}
	// On localhost (a host of its own to a browser's cookies) it logs in
	// the same.
	lh := noFollow()
	if resp, _ := do(lh, http.MethodGet, "/?login="+testLogin, "localhost:"+port, nil, nil); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("the login URL on localhost:%s = %d; want 303", port, resp.StatusCode)
	}
	if resp, body := do(lh, http.MethodGet, "/", "localhost:"+port, nil, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("the operator's browser on localhost:%s: GET / = %d %q; want 200", port, resp.StatusCode, body)
	}
	resp, body = do(op, http.MethodPost, "/answer", "", url.Values{"ask": {p.Ask}, "option": {"yes"}, "token": {token(t, op, r.url)}}, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "answered yes by operator") {
		t.Errorf("the operator's answer = %d %q; want 200, answered yes by operator", resp.StatusCode, body)
	}
	if !r.get(mesh.RecordsBucket, p.Ask, &rec) || rec.State != mesh.RecordAnswered || rec.Warrant == nil ||
		rec.Warrant.Option != "yes" || rec.Warrant.By.Who != "operator" {
		t.Errorf("record %s = state %s, warrant %+v; want answered yes by operator", p.Ask, rec.State, rec.Warrant)
	}
}

// TestPageWithNoLoginLetsNoneIn: a page given no login secret refuses
// every login and every request.
func TestPageWithNoLoginLetsNoneIn(t *testing.T) {
	page := web.NewStill(bustest.Context(t), web.Config{User: "operator"})
	hs := httptest.NewServer(page)
	t.Cleanup(hs.Close)
	for path, want := range map[string]int{"/?login=": http.StatusForbidden, "/?login=x": http.StatusForbidden, "/": http.StatusUnauthorized} {
		resp, err := http.Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want || len(resp.Cookies()) != 0 {
			t.Errorf("GET %s of a page with no login = %d, cookies %v; want %d, none", path, resp.StatusCode, resp.Cookies(), want)
		}
	}
}

// TestReadLoginKeepsTheSecretPrivate: the login file is made 0600 (its
// directory 0700) with 64 hex digits and read back the same; a file
// others may read, a symbolic link, or one that holds no secret is
// refused naming it, and left as it was.
func TestReadLoginKeepsTheSecretPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	path := filepath.Join(dir, web.LoginFile)
	secret, err := web.ReadLogin(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	di, _ := os.Stat(dir)
	if len(secret) != 64 || fi.Mode().Perm() != 0o600 || di.Mode().Perm() != 0o700 {
		t.Errorf("ReadLogin made %q (%d digits), the file %v, its directory %v; want 64 hex digits, 0600, 0700", secret, len(secret), fi.Mode(), di.Mode())
	}
	if again, err := web.ReadLogin(path); err != nil || again != secret {
		t.Errorf("ReadLogin again = %q, %v; want the same secret", again, err)
	}
	if u := web.LoginURL(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4280}, secret); u != "http://127.0.0.1:4280/?login="+secret {
		t.Errorf("LoginURL = %q", u)
	}

	loose := filepath.Join(t.TempDir(), web.LoginFile)
	if err := os.WriteFile(loose, []byte(secret+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(loose, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), web.LoginFile)
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	junk := filepath.Join(t.TempDir(), web.LoginFile)
	if err := os.WriteFile(junk, []byte("letmein\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, path, says string }{
		{"readable by others", loose, "has mode 0644"},
		{"a symbolic link", link, "not a regular file"},
		{"no secret", junk, "holds no secret"},
	} {
		before, _ := os.Lstat(c.path)
		got, err := web.ReadLogin(c.path)
		if err == nil || !strings.Contains(err.Error(), c.path) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: ReadLogin = %q, %v; want an error naming %s saying %q", c.name, got, err, c.path, c.says)
		}
		if after, _ := os.Lstat(c.path); after.Mode() != before.Mode() || after.Size() != before.Size() {
			t.Errorf("%s: ReadLogin changed the file: %v %d, was %v %d", c.name, after.Mode(), after.Size(), before.Mode(), before.Size())
		}
	}
}
