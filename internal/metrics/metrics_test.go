package metrics_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/mesh-provisioner/mesh-provisioner/internal/asks"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
	"github.com/mesh-provisioner/mesh-provisioner/internal/metrics"
	"github.com/mesh-provisioner/mesh-provisioner/internal/seat"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// scrape reads url's /metrics and returns every family by name.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics = %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

// value returns the value of the series name{labels...} (label pairs as
// "k", "v", ...), and whether it is there.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

func health(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url + "/healthz")
	if err != nil {
		t.Fatalf("GET /healthz: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestMetricsAfterComposition(t *testing.T) {
	homelab, err := os.ReadFile("../../examples/homelab.yaml")
	if err != nil {
		t.Fatal(err)
	}
	srv := bustest.Server(t)
	ctx := bustest.Context(t)
	_, ojs := bustest.Connect(t, srv, "operator")
	rnc, rjs := bustest.Connect(t, srv, "mesh-asks")
	if _, err := asks.Start(ctx, rnc, rjs, nil); err != nil {
		t.Fatal(err)
	}
	apply := func(text []byte) {
		t.Helper()
		f, err := meshfile.Parse("homelab.yaml", text)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := meshfile.Apply(ctx, ojs, f, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	apply(homelab)

	m := metrics.New()
	_, mjs := bustest.Connect(t, srv, "metrics")
	m.Follow(ctx, mjs)
	snc, sjs := bustest.Connect(t, srv, "seat")
	st := seat.New(sjs, seat.Config{OnResult: m.Result, OnWriteError: m.WriteError})
	check := func() (bool, string) {
		s, why := st.Lease()
		return snc.IsConnected() && (s == seat.LeaseHeld || s == seat.LeaseWaiting), string(s) + ": " + why
	}
	web := httptest.NewServer(m.Handler(check))
	defer web.Close()

	seatCtx, stopSeat := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- st.Run(seatCtx) }()
	marks := seat.Marks(ctx, ojs)
	bustest.WaitFor(t, 0, "the seat to settle", func() bool { return st.Settled(marks) })

	// What the seat wrote, counted per state from the bucket itself.
	provs := bus.Follow(ctx, ojs, mesh.ProvisionsBucket, bus.Options{})
	<-provs.Ready()
	want := map[mesh.State]int{}
	provs.Range(func(_ string, it bus.Item) bool {
		var p mesh.Provision
		if err := json.Unmarshal(it.Value, &p); err != nil {
			t.Errorf("provision: %v", err)
		}
		want[p.State]++
		return true
	})
	if want[mesh.Provided] != 0 || want[mesh.Asked] == 0 {
		t.Fatalf("states after the first composition = %v; want only unanswered keys (no provider runs)", want)
	}
	composed := 0
	for _, n := range []string{"control", "ace", "g14", "shanks"} {
		composed += st.Compositions(n)
	}
	if composed < 4 {
		t.Fatalf("the seat composed %d times; want every one of the 4 nodes at least once", composed)
	}

	// The gauges follow their copies: wait until they show the bucket.
	var fams map[string]*dto.MetricFamily
	bustest.WaitFor(t, 0, "the provisions gauge to reach the bucket's counts", func() bool {
		fams = scrape(t, web.URL)
		for _, s := range metrics.States {
			if v, _ := value(fams, "mesh_provisioner_provisions", "state", string(s)); int(v) != want[s] {
				return false
			}
		}
		return true
	})
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"mesh_provisioner_compositions_total", nil, float64(composed)},
		{"mesh_provisioner_composition_seconds", nil, float64(composed)}, // samples
		{"mesh_provisioner_write_errors_total", nil, 0},
		{"mesh_provisioner_open_asks", nil, 0},
		{"mesh_provisioner_odd_provisions", nil, 0},
		{"mesh_provisioner_provisions", []string{"state", "asked"}, float64(want[mesh.Asked])},
		{"mesh_provisioner_provisions", []string{"state", "retiring"}, 0},
	} {
		if got, ok := value(fams, c.name, c.labels...); !ok || got != c.want {
			t.Errorf("%s%v = %v (present %v); want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	if code, body := health(t, web.URL); code != http.StatusOK || !strings.Contains(body, "held") {
		t.Errorf("/healthz = %d %q; want 200 saying the lease is held", code, body)
	}

	// vaultwarden leaves ace: its three keys turn retiring; the database and
	// route keys are asked, and the credential the database key depends on
	// retires without an ask until that key is retired (spec 6).
	apply([]byte(strings.NewReplacer(
		"ace: [gitea, vaultwarden, node-tools]", "ace: [gitea, node-tools]",
		"vaultwarden: 4a4a4a, ", "",
	).Replace(string(homelab))))
	bustest.WaitFor(t, 0, "two open asks and three retiring keys in the gauges", func() bool {
		fams = scrape(t, web.URL)
		open, _ := value(fams, "mesh_provisioner_open_asks")
		ret, _ := value(fams, "mesh_provisioner_provisions", "state", "retiring")
		return open == 2 && ret == 3
	})
	if got, _ := value(fams, "mesh_provisioner_compositions_total"); got <= float64(composed) {
		t.Errorf("compositions_total = %v after an apply; want more than %d", got, composed)
	}

	// A stopped seat is unhealthy.
	stopSeat()
	if err := <-done; err != nil {
		t.Errorf("seat.Run = %v", err)
	}
	if code, body := health(t, web.URL); code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "unhealthy: stopped") {
		t.Errorf("/healthz after the seat stopped = %d %q; want 503 saying it stopped", code, body)
	}
}
