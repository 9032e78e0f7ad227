package pgprovider

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// scramIterations is PostgreSQL's default iteration count for
// SCRAM-SHA-256 (scram_iterations).
const scramIterations = 4096

// scramVerifier returns the SCRAM-SHA-256 verifier PostgreSQL stores for
// password (RFC 5802, RFC 7677), with a new random salt, so that the
// password itself never travels to the server nor reaches its logs.
func scramVerifier(password string) (string, error) {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("postgres: salt: %w", err)
	}
	salted, err := pbkdf2.Key(sha256.New, password, salt, scramIterations, sha256.Size)
	if err != nil {
		return "", fmt.Errorf("postgres: scram: %w", err)
	}
	clientKey := mac(salted, "Client Key")
	storedKey := sha256.Sum256(clientKey)
	serverKey := mac(salted, "Server Key")
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", scramIterations, b64(salt), b64(storedKey[:]), b64(serverKey)), nil
}

func mac(key []byte, msg string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(msg))
	return h.Sum(nil)
}

// scramMatches reports whether verifier, as PostgreSQL stores it in
// pg_authid.rolpassword ("SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>",
// base64), was made from password: both keys are derived again from
// password with the verifier's salt and iterations and compared in
// constant time. A verifier of another shape (md5, none) does not match.
func scramMatches(verifier, password string) bool {
	rest, ok := strings.CutPrefix(verifier, "SCRAM-SHA-256$")
	if !ok {
		return false
	}
	params, keys, ok := strings.Cut(rest, "$")
	if !ok {
		return false
	}
	iterText, saltText, ok1 := strings.Cut(params, ":")
	storedText, serverText, ok2 := strings.Cut(keys, ":")
	iterations, err := strconv.Atoi(iterText)
	if !ok1 || !ok2 || err != nil || iterations <= 0 || iterations > 1<<20 {
		return false
	}
	b64 := base64.StdEncoding.DecodeString
	salt, err1 := b64(saltText)
	stored, err2 := b64(storedText)
	server, err3 := b64(serverText)
	if err1 != nil || err2 != nil || err3 != nil {
		return false
	}
	salted, err := pbkdf2.Key(sha256.New, password, salt, iterations, sha256.Size)
	if err != nil {
		return false
	}
	storedKey := sha256.Sum256(mac(salted, "Client Key"))
	return hmac.Equal(storedKey[:], stored) && hmac.Equal(mac(salted, "Server Key"), server)
}
