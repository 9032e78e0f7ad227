package auth_test

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
)

// rawConnect connects to url as the user of creds speaking the protocol
// itself (no client library refusing or rewriting first): it signs the
// server's nonce, sends CONNECT (headers on) and waits for the PONG of its
// PING, failing t on the server's -ERR. The connection, closed in
// t.Cleanup, has a 10 s deadline.
func rawConnect(t *testing.T, url, creds string) (net.Conn, *bufio.Reader) {
	t.Helper()
	b, err := os.ReadFile(creds)
	if err != nil {
		t.Fatal(err)
	}
	token, err := nkeys.ParseDecoratedJWT(b)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.ParseDecoratedNKey(b)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "nats://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "INFO ") {
		t.Fatalf("the server's first line %q: %v", line, err)
	}
	var info struct {
		Nonce string `json:"nonce"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "INFO ")), &info); err != nil {
		t.Fatal(err)
	}
	sig, err := kp.Sign([]byte(info.Nonce))
	if err != nil {
		t.Fatal(err)
	}
	connect, err := json.Marshal(map[string]any{"jwt": token, "sig": base64.RawURLEncoding.EncodeToString(sig), "verbose": false, "pedantic": false,
		"protocol": 1, "headers": true, "no_responders": true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(conn, "CONNECT %s\r\nPING\r\n", connect); err != nil {
		t.Fatal(err)
	}
	if line := rawUntilPong(r); line != "PONG" {
		t.Fatalf("connecting as %s: %s", creds, line)
	}
	return conn, r
}

// rawUntilPong reads the server's lines until its PONG or an -ERR, and
// returns that line ("PONG", the error line, or the read's error).
func rawUntilPong(r *bufio.Reader) string {
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return err.Error()
		}
		line = strings.TrimSpace(line)
		if line == "PONG" || strings.HasPrefix(line, "-ERR") {
			return line
		}
	}
}
