package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// TestFiveServersOverTLS runs the five servers auth gen writes with
// --server and --tls-cert, --tls-key and --tls-ca (a CA and one server
// certificate made here, for 127.0.0.1, as real files), each
// nats-server's own binary. The cluster forms: every server has routes to
// the four others and the same JetStream meta leader of a cluster of five.
// A connection that does not know the CA is refused (the servers'
// certificate is not the system's), and a route connection in plain text
// without the route user's password gets no answer. The seat and
// control's client, each a process of its own with --tls-ca, run on
// buckets of three replicas, the operator applies with --tls-ca, and
// control's client applies its plan; so does ace's, an edge node's, through
// the leafnode server auth gen writes with --leaf (its links to the five
// servers over TLS, checked against the CA; no certificate of its own).
func TestFiveServersOverTLS(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "auth")
	work := t.TempDir()
	ca, cert, key := makeCerts(t, work)
	file := filepath.Join(work, "mesh.yaml")
	if err := os.WriteFile(file, []byte(strings.Replace(strings.Replace(joinMesh, "%s", ", ace", 1), "%s", "  ace: [app]\n", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	var urls, monitors, hubs []string
	var routePorts []int
	args := []string{"auth", "gen", "-f", file, "-o", dir, "--cluster", "lab", "--tls-cert", cert, "--tls-key", key, "--tls-ca", ca, "--domain", "hub"}
	for i := 1; i <= 5; i++ {
		client, route, http, leaf := freePort(t), freePort(t), freePort(t), freePort(t)
		args = append(args, "--server", fmt.Sprintf("nats-%d=127.0.0.1:%d:%d:%d:%d", i, client, route, http, leaf))
		urls = append(urls, "nats://127.0.0.1:"+strconv.Itoa(client))
		monitors = append(monitors, "http://127.0.0.1:"+strconv.Itoa(http))
		routePorts = append(routePorts, route)
		hubs = append(hubs, "nats-leaf://127.0.0.1:"+strconv.Itoa(leaf))
	}
	leafPort := freePort(t)
	args = append(args, "--leaf", "ace:"+strconv.Itoa(leafPort)+"="+strings.Join(hubs, ","))
	runMain(t, args...)
	var servers []*process
	for i := 1; i <= 5; i++ {
		servers = append(servers, startNATS(t, filepath.Join(dir, auth.ServersDir, "nats-"+strconv.Itoa(i), auth.ConfigFile)))
	}
	leaf := startNATS(t, filepath.Join(dir, auth.LeavesDir, "ace", auth.ConfigFile))

	// Every server routes to the four others and names the same meta
	// leader of five.
	var routez struct {
		Routes []struct {
			RemoteName string `json:"remote_name"`
		} `json:"routes"`
	}
	var jsz struct {
		Meta *struct {
			Leader string `json:"leader"`
			Size   int    `json:"cluster_size"`
		} `json:"meta_cluster"`
	}
	leaders := make([]string, 5)
	waitFor(t, time.Minute, "five servers, each routed to the four others under one meta leader", servers, func() bool {
		for i, m := range monitors {
			if !getJSON(m+"/routez", &routez) || !getJSON(m+"/jsz", &jsz) {
				return false
			}
			peers := map[string]bool{}
			for _, r := range routez.Routes {
				peers[r.RemoteName] = true
			}
			if len(peers) != 4 || peers["nats-"+strconv.Itoa(i+1)] || jsz.Meta == nil || jsz.Meta.Leader == "" || jsz.Meta.Size != 5 {
				return false
			}
			leaders[i] = jsz.Meta.Leader
		}
		for _, l := range leaders {
			if l != leaders[0] {
				return false
			}
		}
		return true
	})
	t.Logf("five servers routed to each other, meta leader %s", leaders[0])

	all := strings.Join(urls, ",")
	op := auth.CredsPath(dir, access.DefaultOperator)
	// The servers' certificate is signed by the mesh's CA only, and they
	// take no plain text.
	if nc, err := nats.Connect(urls[0], nats.UserCredentials(op), nats.NoReconnect(), nats.Timeout(3*time.Second)); err == nil {
		nc.Close()
		t.Error("a connection that does not know the CA was taken")
	}
	if nc, err := nats.Connect(urls[0], nats.UserCredentials(op), nats.NoReconnect(), nats.Timeout(3*time.Second), nats.RootCAs(ca)); err != nil {
		t.Errorf("the operator's connection with the CA was refused: %v", err)
	} else {
		nc.Close()
	}
	if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(routePorts[0]), 3*time.Second); err == nil {
		// A route without TLS and without the route user's password.
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "CONNECT {\"verbose\":false,\"name\":\"intruder\",\"cluster\":\"lab\"}\r\nPING\r\n")
		buf := make([]byte, 4096)
		var got strings.Builder
		for !strings.Contains(got.String(), "PONG") {
			n, err := c.Read(buf)
			got.Write(buf[:n])
			if err != nil {
				break
			}
		}
		c.Close()
		if strings.Contains(got.String(), "PONG") {
			t.Errorf("a route connection without TLS or password was answered: %q", got.String())
		}
	}

	tls := func(user string, args ...string) []string {
		return append(args, "--nats", all, "--creds", auth.CredsPath(dir, user), "--tls-ca", ca, "--replicas", "3")
	}
	seat := start(t, "seat", tls(mesh.Module, "serve")...)
	controlRoot := filepath.Join(t.TempDir(), "control")
	control := start(t, "client-control", tls(access.ClientUser("control"), "client", "--node", "control", "--root", controlRoot)...)
	// ace, an edge node, through its leaf: the leaf's links to the five
	// servers are TLS, checked against the CA.
	leafConf, err := os.ReadFile(filepath.Join(dir, auth.LeavesDir, "ace", auth.ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(leafConf), "tls: { ca_file: "); n == 0 || n != strings.Count(string(leafConf), "credentials:") {
		t.Errorf("ace's leaf links %d accounts, %d over TLS with the CA:\n%s", strings.Count(string(leafConf), "credentials:"), n, leafConf)
	}
	waitFor(t, time.Minute, "ace's leaf to link each account to the servers over TLS", append([]*process{leaf}, servers...), func() bool {
		return strings.Count(leaf.output(), "Leafnode connection created") >= strings.Count(string(leafConf), "credentials:")
	})
	root := filepath.Join(t.TempDir(), "ace")
	client := start(t, "client-ace", "client", "--node", "ace", "--root", root, "--nats", "nats://127.0.0.1:"+strconv.Itoa(leafPort),
		"--domain", "hub", "--creds", auth.CredsPath(dir, access.ClientUser("ace")))
	procs := append([]*process{seat, control, client, leaf}, servers...)
	out := runMain(t, tls(access.DefaultOperator, "apply", "-f", file)...)
	if !strings.Contains(out, "applied "+file) {
		t.Errorf("apply printed %q", out)
	}

	nc, js, err := bus.Connect(bus.Dial{URL: all, Name: "operator", Creds: op, CA: ca})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if _, err := nc.TLSConnectionState(); err != nil {
		t.Errorf("the operator's connection to %s is not over TLS: %v", nc.ConnectedUrl(), err)
	}
	ctx := bustest.Context(t)
	plans := bus.Follow(ctx, js, mesh.PlansBucket, bus.Options{Leader: true})
	applied := bus.Follow(ctx, js, mesh.AppliedBucket, bus.Options{Leader: true})
	for _, k := range []string{"control.mesh-vault", "ace.app"} {
		waitFor(t, time.Minute, "the client to apply "+k+" over TLS", procs, func() bool {
			pi, ok := plans.Get(k)
			ai, ok2 := applied.Get(k)
			var p mesh.Plan
			var a mesh.Applied
			return ok && ok2 && json.Unmarshal(pi.Value, &p) == nil && json.Unmarshal(ai.Value, &a) == nil && a.Fingerprint == p.Fingerprint
		})
	}
	if st, err := os.Stat(filepath.Join(root, "app", "state")); err != nil || !st.IsDir() {
		t.Errorf("ace's client made no folder app/state under its root: %v", err)
	}
	st, err := js.Stream(ctx, "KV_"+mesh.PlansBucket)
	if err != nil {
		t.Fatal(err)
	}
	if cl := st.CachedInfo().Cluster; cl == nil || len(cl.Replicas) != 2 {
		t.Errorf("the plans bucket's cluster: %+v; want a leader and two replicas", cl)
	}
}

// getJSON decodes the JSON at url into v; false when it cannot.
func getJSON(url string, v any) bool {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(v) == nil
}

// makeCerts writes into dir a CA (ca.pem) and a certificate for 127.0.0.1
// and localhost that it signs (server.pem, server-key.pem), for servers
// and for their routes' clients, and returns their paths.
func makeCerts(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "mesh test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "nats"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		// Routes check each other's certificate (verify): each server is
		// a TLS client of the others too.
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:    []string{"localhost"},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, cert, key = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
	for path, block := range map[string]*pem.Block{
		ca:   {Type: "CERTIFICATE", Bytes: caDER},
		cert: {Type: "CERTIFICATE", Bytes: srvDER},
		key:  {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return ca, cert, key
}
