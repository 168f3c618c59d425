package director_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/eppkit/eppkit/internal/promscrape"
	"github.com/eppkit/eppkit/reference/director"
	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins"
)

// requestCounts reads eppkit_epp_requests_total by code label.
func requestCounts(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	fams, err := promscrape.Gather(reg)
	if err != nil {
		t.Fatal(err)
	}
	return fams.ByLabel(director.MetricRequests, "code")
}

// TestClientCancellationIsNotAServerError: a request whose context was cancelled (the client
// went away) is counted under "cancelled", not as a 500; a bad request on a cancelled context
// keeps its 400.
func TestClientCancellationIsNotAServerError(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	src := &source{eps: []*framework.EndpointMetadata{ep(1)}}
	ms := &metricsSource{m: map[string]*framework.Metrics{"10.1.0.1:8000": {UpdateTime: clk.Now()}}}
	reg := framework.NewRegistry()
	plugins.RegisterAll(reg)
	rt, err := framework.NewRuntime(nil, reg, framework.RuntimeOptions{Clock: clk, Seed: 3, Logger: slog.New(slog.DiscardHandler),
		Endpoints: src.Endpoints})
	if err != nil {
		t.Fatal(err)
	}
	preg := prometheus.NewRegistry()
	obs, err := director.NewObserver(preg)
	if err != nil {
		t.Fatal(err)
	}
	d, err := director.New(director.Options{Runtime: rt, Endpoints: src, Metrics: ms, Clock: clk, Observer: obs,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	in := func(body string) *director.Input {
		return &director.Input{Headers: map[string]string{":path": "/v1/completions"}, Body: []byte(body)}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = d.HandleRequest(ctx, in(`{"model":"m","prompt":"p"}`))
	if err == nil || !director.Cancelled(ctx, err) {
		t.Fatalf("HandleRequest on a cancelled context: err %v, want one Cancelled reports", err)
	}
	if _, err := d.HandleRequest(ctx, in(`{not json`)); !errors.Is(err, framework.ErrBadRequest) || director.Cancelled(ctx, err) {
		t.Fatalf("bad request on a cancelled context: err %v, want ErrBadRequest not reported as cancelled", err)
	}
	res, err := d.HandleRequest(context.Background(), in(`{"model":"m","prompt":"p"}`))
	if err != nil {
		t.Fatal(err)
	}
	d.EndRequest(res.Request)
	got := requestCounts(t, preg)
	want := map[string]float64{director.CodeCancelled: 1, "400": 1, "200": 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("%s by code (-want +got), no 500 for a client cancellation:\n%s", director.MetricRequests, diff)
	}
	if n := rt.PluginState().Len(); n != 0 {
		t.Fatalf("plugin state holds %d requests", n)
	}
}
