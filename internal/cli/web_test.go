package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
)

// loginURLRe finds the login URL web and up print, and the file they say
// its secret is in.
var loginURLRe = regexp.MustCompile(`web page on (http://(\S+)/\?login=([0-9a-f]+)) \(answers as \S+; open this URL to log in: its secret is in (\S+), for your Unix user only\)`)

// pageLogin is what web or up printed of its page's login.
type pageLogin struct {
	url, addr, secret, file string
}

// waitLogin waits until out says the page's login URL, as the operator
// reads it on the terminal.
func waitLogin(t *testing.T, out fmt.Stringer) pageLogin {
	t.Helper()
	var l pageLogin
	bustest.WaitFor(t, time.Minute, "the page's login URL", func() bool {
		m := loginURLRe.FindStringSubmatch(out.String())
		if m != nil {
			l = pageLogin{url: m[1], addr: m[2], secret: m[3], file: m[4]}
		}
		return m != nil
	})
	return l
}

// browser returns the operator's browser (a client with a cookie jar)
// once it opened the login URL and was sent to the page.
func (l pageLogin) browser(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Jar: jar}
	resp, err := c.Get(l.url)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Request.URL.String() != "http://"+l.addr+"/" {
		t.Fatalf("the login URL %s led to %s (%d); want the page without the secret", l.url, resp.Request.URL, resp.StatusCode)
	}
	return c
}

// checkLoginFile fails t unless the login's file is where want says, mode
// 0600, with the secret printed in it.
func (l pageLogin) checkLoginFile(t *testing.T, want string) {
	t.Helper()
	b, err := os.ReadFile(want)
	fi, serr := os.Stat(want)
	if l.file != want || err != nil || serr != nil || strings.TrimSpace(string(b)) != l.secret || fi.Mode().Perm() != 0o600 {
		t.Errorf("the login's secret is said to be in %s; want %s, 0600, holding the secret printed (%v, %v)", l.file, want, err, fi)
	}
}

// refusedWithoutLogin fails t unless a GET of the page and a POST of an
// answer from a browser that never opened the login URL (another local
// user's) are refused 401, saying where the secret lives.
func (l pageLogin) refusedWithoutLogin(t *testing.T) {
	t.Helper()
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		path := "/"
		if method == http.MethodPost {
			path = "/answer"
		}
		req, _ := http.NewRequest(method, "http://"+l.addr+path, strings.NewReader("ask=x&option=yes"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(b), l.file) {
			t.Errorf("%s %s without the login = %d %q; want 401 naming %s", method, path, resp.StatusCode, b, l.file)
		}
	}
}

// TestWebServesThePage runs "web" against a server: it prints the page's
// login URL, its secret kept in --login (0600); a browser without it is
// refused; the operator's browser, once it opened the URL, loads the page,
// which answers as the user given.
func TestWebServesThePage(t *testing.T) {
	t.Parallel()
	srv := bustest.Server(t)
	ctx, cancel := context.WithCancel(bustest.Context(t))
	addr := freeAddr(t)
	file := filepath.Join(t.TempDir(), "login")
	var out syncBuffer
	root := Root()
	root.SetOut(&out)
	root.SetErr(io.Discard)
	root.SetArgs([]string{"web", "--nats", srv.URL(), "--listen", addr, "--user", "alice", "--login", file})
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := root.ExecuteContext(ctx); err != nil {
			t.Errorf("web: %v", err)
		}
	}()
	defer func() { cancel(); <-done }()
	l := waitLogin(t, &out)
	if l.addr != addr {
		t.Errorf("the login URL is on %s; want --listen %s", l.addr, addr)
	}
	l.checkLoginFile(t, file)
	l.refusedWithoutLogin(t)
	browser := l.browser(t)
	var body string
	bustest.WaitFor(t, 0, "the page on "+addr, func() bool {
		resp, err := browser.Get("http://" + addr + "/")
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

// TestUpServesThePageBehindItsLogin runs up with its page: it prints the
// login URL where it says the page's address, its secret in
// DATA/web-login (0600); a browser without it is refused 401; the
// operator's, once it opened the URL, sees the mesh's nodes.
func TestUpServesThePageBehindItsLogin(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "data")
	ctx, cancel := context.WithCancel(bustest.Context(t))
	var out syncBuffer
	root := Root()
	root.SetOut(&out)
	root.SetErr(io.Discard)
	root.SetArgs([]string{"up", "--data", data, "--listen", "127.0.0.1:0", "--web", "127.0.0.1:0", "--clients=false", "--log-level", "error"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	defer func() { cancel(); <-done }()
	l := waitLogin(t, &out)
	l.checkLoginFile(t, filepath.Join(data, "web-login"))
	l.refusedWithoutLogin(t)
	browser := l.browser(t)
	var body string
	bustest.WaitFor(t, time.Minute, "the page with node ace", func() bool {
		resp, err := browser.Get("http://" + l.addr + "/?node=ace")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusOK && strings.Contains(body, "ace.gitea.database")
	})
}

// TestWebStartsBeforeItsServer runs "web" before its NATS server is up: it
// says once that it tries again, and once the server runs (the homelab
// applied into it) serves the page, with ace among the nodes. It exited at
// once with "no NATS server answers".
func TestWebStartsBeforeItsServer(t *testing.T) {
	t.Setenv("HOME", t.TempDir()) // no default credentials
	natsAddr, addr := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(bustest.Context(t))
	var stderr syncBuffer
	root := Root()
	root.SetErr(&stderr)
	var out syncBuffer
	root.SetOut(&out)
	root.SetArgs([]string{"web", "--nats", "nats://" + natsAddr, "--listen", addr, "--login", filepath.Join(t.TempDir(), "login")})
	done := make(chan struct{})
	var ended error
	go func() {
		defer close(done)
		ended = root.ExecuteContext(ctx)
	}()
	defer func() { cancel(); <-done }()
	bustest.WaitFor(t, 0, "web to say it tries again", func() bool {
		select {
		case <-done:
			t.Fatalf("web without a server ended: %v\nstderr:\n%s", ended, stderr.String())
		default:
		}
		return strings.Contains(stderr.String(), "the bus did not answer; trying again")
	})
	srv, err := bus.StartServer(bus.ServerConfig{Dir: t.TempDir(), Listen: natsAddr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	if _, errOut, err := run(t, "apply", "-f", homelabFile, "--nats", srv.URL()); err != nil {
		t.Fatalf("apply: %v\n%s", err, errOut)
	}
	browser := waitLogin(t, &out).browser(t)
	var body string
	bustest.WaitFor(t, 30*time.Second, "the page on "+addr+" with node ace", func() bool {
		resp, err := browser.Get("http://" + addr + "/")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusOK && strings.Contains(body, "ace")
	})
	if n := strings.Count(stderr.String(), "level=WARN"); n != 1 {
		t.Errorf("web said %d warnings while no server answered; want one:\n%s", n, stderr.String())
	}
}

// TestWebRefusesALooseLoginFile: a login file its group or others may
// read is refused, naming it and its mode, and no page is served; the
// file is left as it was.
func TestWebRefusesALooseLoginFile(t *testing.T) {
	t.Parallel()
	srv := bustest.Server(t)
	file := filepath.Join(t.TempDir(), "login")
	if err := os.WriteFile(file, []byte(strings.Repeat("ab", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	_, _, err := run(t, "web", "--nats", srv.URL(), "--listen", addr, "--login", file)
	if err == nil || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "has mode 0644") {
		t.Errorf("web with a login file of mode 0644 = %v; want an error naming %s and its mode", err, file)
	}
	if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o644 {
		t.Errorf("the login file's mode is %v after web; want it left 0644", fi.Mode())
	}
}
