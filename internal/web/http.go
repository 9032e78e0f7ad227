package web

import (
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/asks"
)

//go:embed assets
var assets embed.FS

var tmpl = template.Must(template.New("page.html").Funcs(template.FuncMap{
	"nodeLink":   nodeLink,
	"moduleLink": moduleLink,
	"keyLink":    keyLink,
	"stateLink":  stateLink,
	"rfc3339":    func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"clock":      func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
	"title": func(s string) string {
		if s == "" {
			return s
		}
		return strings.ToUpper(s[:1]) + s[1:]
	},
}).ParseFS(assets, "assets/page.html"))

// coalesce is how long the event stream waits after a change before it
// renders, so that a burst of changes is sent once.
const coalesce = 100 * time.Millisecond

// ServeHTTP serves the page:
//
//   - GET / renders one view of the mesh (at most [PageSize] rows a
//     section): the summary with the open asks, held modules and one page
//     of nodes; ?q= a search (words, or state:, node:, module:, key:);
//     ?node=, ?module=, ?key= a drill-down (a key with its why walk);
//     ?<section>-page=N a section's page. A drill-down to a key, node or
//     module the page holds nothing of answers 404, its page saying "No
//     such key" (node, module) with the page's header and links (503 with
//     Retry-After while the page's copies are still reading the bus);
//   - GET /events?v=VERSION&<the view's query> is a server-sent event
//     stream of that view: an event "delta" ([delta] in JSON) after each
//     change that alters what the view shows, carrying only the parts and
//     rows that changed (all of the view when ?v= is behind);
//   - POST /answer answers an open ask (form fields ask, option, token)
//     as the page's user, answering text/plain: 200 when answered, 403 for
//     a cross-site request or a wrong token, 409 with the router's why when
//     the router refuses, 502 when no router answers;
//   - GET /assets/ serves the page's style and script.
//
// Every route but the login answers only a browser logged in:
//
//   - GET ?login=SECRET (on any path) logs a browser in: the page's
//     secret ([Config.Login]) sets a session cookie (mesh-web-<port>,
//     HttpOnly, SameSite=Strict) and redirects (303) to the same URL
//     without it; a wrong secret answers 403, saying where the secret
//     lives;
//   - a request without a session's cookie answers 401, saying how to log
//     in and where the secret lives;
//   - a request whose Host is not the address it came in on (its IP and
//     port; localhost and its port on loopback; a host name of
//     [Config.Hosts] and the port) answers 421 before anything else: a
//     hostile site's name rebound to this address reads nothing.
//
// Every answer is sent with a Content-Security-Policy that allows only the
// page's own script and style and no framing.
func (p *Page) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	if !p.hostAllowed(r) {
		p.log.Warn("web: refused a request naming another host", "host", r.Host, "remote", r.RemoteAddr)
		http.Error(w, "refused: host "+r.Host+" is not this page's (DNS rebinding?): use the address it listens on", http.StatusMisdirectedRequest)
		return
	}
	if r.URL.Query().Has(LoginParam) && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		p.serveLogin(w, r)
		return
	}
	if !p.loggedIn(r) {
		p.refuseLogin(w, r)
		return
	}
	switch {
	case r.URL.Path == "/" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		p.servePage(w, r)
	case r.URL.Path == "/events" && r.Method == http.MethodGet:
		p.serveEvents(w, r)
	case r.URL.Path == "/answer" && r.Method == http.MethodPost:
		p.serveAnswer(w, r)
	case strings.HasPrefix(r.URL.Path, "/assets/") && r.Method == http.MethodGet:
		h.Set("Cache-Control", "no-cache")
		http.FileServerFS(assets).ServeHTTP(w, r)
	case r.URL.Path == "/" || r.URL.Path == "/events" || r.URL.Path == "/answer":
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	default:
		http.NotFound(w, r)
	}
}

// hostAllowed reports whether r's Host names this page: the address r
// came in on (IP and port), "localhost" with that port when that address
// is loopback, or one of the configured host names with that port. A Host
// without a port is port 80. A page on loopback so refuses a hostile
// site's name rebound to 127.0.0.1. A request that came through no
// listener (a handler called directly) is checked by name only: an IP
// address, localhost or a configured name.
func (p *Page) hostAllowed(r *http.Request) bool {
	name, port, err := net.SplitHostPort(r.Host)
	if err != nil {
		name, port = r.Host, "80"
	}
	name = strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")
	lhost, lport, through := localAddr(r)
	if through && port != lport {
		return false
	}
	if ip := net.ParseIP(name); ip != nil {
		return !through || ip.Equal(net.ParseIP(lhost))
	}
	if strings.EqualFold(name, "localhost") {
		ip := net.ParseIP(lhost)
		return !through || (ip != nil && ip.IsLoopback())
	}
	for _, h := range p.cfg.Hosts {
		if strings.EqualFold(h, name) {
			return true
		}
	}
	return false
}

// view builds and renders the screen of q.
func (p *Page) view(ctx context.Context, q query) (*screen, error) {
	sc := p.build(ctx, q)
	if err := p.renderScreen(&sc, p.cfg.Now().UTC()); err != nil {
		return nil, err
	}
	return &sc, nil
}

func (p *Page) servePage(w http.ResponseWriter, r *http.Request) {
	sc, err := p.view(r.Context(), parseQuery(r.URL.Query()))
	var b []byte
	if err == nil {
		b, err = execute("page", pageData{screen: sc, User: p.cfg.User})
	}
	if err != nil {
		p.log.Error("web: rendering the page", "err", err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	switch {
	case sc.Missing != "" && !p.ready():
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(http.StatusServiceUnavailable) // it may be among what is not read yet
	case sc.Missing != "":
		w.WriteHeader(http.StatusNotFound)
	}
	_, _ = w.Write(b)
}

type pageData struct {
	*screen
	User string
}

// serveEvents streams the changes of one view (the query of the request,
// as the page's own URL has it): at each change, after a short wait that
// gathers a burst, it renders the view again and sends an event "delta"
// whose data is a [delta] in JSON: only the parts and items that differ
// from what it sent before. A stream whose ?v= is not the page's version
// starts with the view's parts all sent.
func (p *Page) serveEvents(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	q := parseQuery(r.URL.Query())
	since, _ := strconv.ParseUint(r.URL.Query().Get("v"), 10, 64)
	ctx := r.Context()
	var last *screen
	settle := coalesce
	for {
		version, changed := p.watch()
		if last == nil || version != last.Version {
			start := time.Now()
			sc, err := p.view(ctx, q)
			// A view that takes long to make (a search of every key) is
			// made at most every twice its time.
			settle = max(coalesce, 2*time.Since(start))
			if err != nil {
				p.log.Error("web: rendering the page's view", "err", err)
				return
			}
			var d delta
			switch {
			case last != nil:
				d = diff(last, sc)
			case sc.Version != since:
				d = diff(nil, sc) // the page is behind: all of its view
			default:
				d = delta{Version: sc.Version} // the page shows this version
			}
			if last == nil || d.Content != "" || len(d.Parts) > 0 {
				b, err := json.Marshal(d)
				if err != nil {
					return
				}
				if _, err := fmt.Fprintf(w, "event: delta\ndata: %s\n\n", b); err != nil {
					return
				}
				if err := rc.Flush(); err != nil {
					return
				}
			}
			last = sc
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-p.done:
			return
		case <-changed:
		}
		select { // let a burst of changes settle
		case <-ctx.Done():
			return
		case <-time.After(settle):
		}
	}
}

// sameOrigin reports whether r comes from the page itself: its
// Sec-Fetch-Site, when sent, is same-origin (or none: typed by the user),
// and its Origin, when sent, names the host it was sent to.
func sameOrigin(r *http.Request) (bool, string) {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" && s != "none" {
		return false, "Sec-Fetch-Site is " + s
	}
	if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host && o != "https://"+r.Host {
		return false, "Origin " + o + " is not http://" + r.Host
	}
	return true, ""
}

func (p *Page) serveAnswer(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if ok, why := sameOrigin(r); !ok {
		p.log.Warn("web: refused a cross-site answer", "why", why, "remote", r.RemoteAddr)
		http.Error(w, "refused: a cross-site request ("+why+")", http.StatusForbidden)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "the form does not parse: "+err.Error(), http.StatusBadRequest)
		return
	}
	token := r.PostForm.Get("token")
	if subtle.ConstantTimeCompare([]byte(token), []byte(p.token)) != 1 {
		p.log.Warn("web: refused an answer without the page's token", "remote", r.RemoteAddr)
		http.Error(w, "refused: the page's token is missing or wrong (reload the page)", http.StatusForbidden)
		return
	}
	id, option := r.PostForm.Get("ask"), r.PostForm.Get("option")
	if id == "" || option == "" {
		http.Error(w, "want the fields ask and option", http.StatusBadRequest)
		return
	}
	rec, err := p.answer(r.Context(), id, option)
	var re *asks.RouterError
	switch {
	case errors.As(err, &re):
		http.Error(w, fmt.Sprintf("ask %s not answered: %s", id, re.Why), http.StatusConflict)
		return
	case err != nil:
		p.log.Error("web: answering an ask", "ask", id, "option", option, "err", err)
		http.Error(w, fmt.Sprintf("ask %s not answered: %v", id, err), http.StatusBadGateway)
		return
	}
	who := p.cfg.User
	if rec.Warrant != nil {
		who = rec.Warrant.By.Who
	}
	p.log.Info("web: answered an ask", "ask", id, "option", option, "by", who)
	fmt.Fprintf(w, "ask %s answered %s by %s: %s\n", id, option, who, rec.Ask.Headline)
}

// Serve listens on addr (host:port; port 0 picks a free one) and serves h
// until ctx is done. It returns the address it listens on, or the listen
// error at once; errors after that go to log.
func Serve(ctx context.Context, addr string, h http.Handler, log *slog.Logger) (net.Addr, error) {
	if log == nil {
		log = slog.Default()
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("web: listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("web: serving stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
	context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx) // event streams end with ctx (BaseContext)
	})
	return ln.Addr(), nil
}
