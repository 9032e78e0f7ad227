package web

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// LoginFile is the name of the file that keeps a page's login secret: up
// keeps it at DATA/web-login, the web command beside the operator's
// credentials file (see [ReadLogin]).
const LoginFile = "web-login"

// LoginParam is the query parameter a browser logs in with:
// http://ADDR/?login=SECRET ([LoginURL]).
const LoginParam = "login"

// maxSessions bounds the sessions a page keeps: a login past it drops the
// oldest.
const maxSessions = 32

// secretBytes is the length of a login secret and of a session's id, in
// random bytes (hex in the file and in the cookie).
const secretBytes = 32

// ReadLogin returns the login secret kept at path, making it when there
// is none: 32 random bytes from crypto/rand, hex, on one line, in a new
// file of mode 0600 (O_EXCL: an existing file or link is never written
// through), its directory made 0700 when missing. A file that is not a
// regular file, that another user owns, or that its group or others may
// read or write is refused naming it: the page's login must be as private
// as the operator's credentials files. A file that holds no secret of that
// shape is refused too.
func ReadLogin(path string) (string, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return makeLogin(path)
	}
	if err != nil {
		return "", fmt.Errorf("web: the login: %w", err)
	}
	if err := privateFile(path, fi); err != nil {
		return "", err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("web: the login: %w", err)
	}
	secret := strings.TrimSpace(string(b))
	if raw, err := hex.DecodeString(secret); err != nil || len(raw) != secretBytes {
		return "", fmt.Errorf("web: the login %s holds no secret (want %d hex digits on one line): remove it and a new one is made", path, 2*secretBytes)
	}
	return secret, nil
}

// privateFile says why the file at path (fi its Lstat) is not a file of
// this user's alone, nil when it is.
func privateFile(path string, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("web: the login %s is not a regular file (%s): remove it and a new one is made", path, fi.Mode().Type())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("web: the login %s is owned by uid %d, not by this user: remove it and a new one is made", path, st.Uid)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("web: the login %s has mode %04o: others than its owner may read it and log in as the operator; chmod 600 it (or remove it and a new one is made)", path, perm)
	}
	return nil
}

// makeLogin writes a new secret to a new file at path.
func makeLogin(path string) (string, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("web: the login: %w", err)
	}
	secret := randomHex()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("web: the login: %w", err)
	}
	_, err = f.WriteString(secret + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return "", fmt.Errorf("web: the login: %w", err)
	}
	return secret, nil
}

// randomHex returns [secretBytes] bytes of crypto/rand, hex.
func randomHex() string {
	b := make([]byte, secretBytes)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// LoginURL returns the URL that logs a browser in to the page served on
// addr with secret: http://ADDR/?login=SECRET.
func LoginURL(addr net.Addr, secret string) string {
	return "http://" + addr.String() + "/?" + url.Values{LoginParam: {secret}}.Encode()
}

// sessions are the session ids a page's logins made, the oldest first.
type sessions struct {
	mu  sync.Mutex
	ids []string
}

// add makes a new session and returns its id.
func (s *sessions) add() string {
	id := randomHex()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ids) >= maxSessions {
		s.ids = s.ids[1:]
	}
	s.ids = append(s.ids, id)
	return id
}

// has reports whether id is a session's, comparing it with each in
// constant time.
func (s *sessions) has(id string) bool {
	if id == "" {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	found := 0
	for _, k := range s.ids {
		found |= subtle.ConstantTimeCompare([]byte(id), []byte(k))
	}
	return found == 1
}

// cookieName is the name of the session cookie of the page that r reached:
// mesh-web-<port> (a browser sends the cookies of 127.0.0.1 to every
// port, so two pages of one machine keep apart), mesh-web when r came in
// on no listener.
func cookieName(r *http.Request) string {
	if _, port, ok := localAddr(r); ok {
		return "mesh-web-" + port
	}
	return "mesh-web"
}

// localAddr returns the address (host, port) of the listener r came in on,
// false when r came through none (a handler called directly).
func localAddr(r *http.Request) (string, string, bool) {
	a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || a == nil {
		return "", "", false
	}
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return "", "", false
	}
	return host, port, true
}

// loggedIn reports whether r carries the cookie of one of the page's
// sessions.
func (p *Page) loggedIn(r *http.Request) bool {
	c, err := r.Cookie(cookieName(r))
	return err == nil && p.sessions.has(c.Value)
}

// serveLogin takes a GET with ?login=: the page's secret (compared in
// constant time) makes a session, set as an HttpOnly, SameSite=Strict
// cookie, and redirects (303) to the same URL without the secret; a wrong
// one is refused 403, saying where the secret lives.
func (p *Page) serveLogin(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	q := r.URL.Query()
	given := q.Get(LoginParam)
	if p.cfg.Login == "" || subtle.ConstantTimeCompare([]byte(given), []byte(p.cfg.Login)) != 1 {
		p.log.Warn("web: refused a login with a wrong secret", "remote", r.RemoteAddr)
		http.Error(w, "refused: the login secret is wrong. "+p.whereLogin(), http.StatusForbidden)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName(r), Value: p.sessions.add(), Path: "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode})
	q.Del(LoginParam)
	to := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
	p.log.Info("web: a browser logged in", "remote", r.RemoteAddr)
	http.Redirect(w, r, to.String(), http.StatusSeeOther)
}

// refuseLogin answers a request without a session 401, saying how to log
// in.
func (p *Page) refuseLogin(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	http.Error(w, "log in first: open the login URL printed when the page started. "+p.whereLogin(), http.StatusUnauthorized)
}

// whereLogin says where the page's login secret lives.
func (p *Page) whereLogin() string {
	if p.cfg.LoginFile == "" {
		return "This page was given no login file."
	}
	return "Its secret is in " + p.cfg.LoginFile + ", readable only by the operator's Unix user: http://HOST:PORT/?" + LoginParam + "=<that secret>"
}
