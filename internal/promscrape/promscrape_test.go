package promscrape

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

const page = `# HELP eppkit_epp_pool_ready_endpoints Ready endpoints.
# TYPE eppkit_epp_pool_ready_endpoints gauge
eppkit_epp_pool_ready_endpoints_other 7
eppkit_epp_pool_ready_endpoints 100
inference_pool_ready_pods{name="bench-10"} 10
# TYPE vllm:request_success_total counter
vllm:request_success_total{finished_reason="stop",model_name="m"} 5
vllm:request_success_total{finished_reason="length",model_name="m"} 4
# TYPE inference_objective_request_predicted_ttft_seconds histogram
inference_objective_request_predicted_ttft_seconds_bucket{target_model_name="a",le="+Inf"} 3
inference_objective_request_predicted_ttft_seconds_sum{target_model_name="a"} 0.03
inference_objective_request_predicted_ttft_seconds_count{target_model_name="a"} 3
inference_objective_request_predicted_ttft_seconds_bucket{target_model_name="b",le="+Inf"} 1
inference_objective_request_predicted_ttft_seconds_sum{target_model_name="b"} 0.05
inference_objective_request_predicted_ttft_seconds_count{target_model_name="b"} 1
`

func TestGetAndSum(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, page)
	}))
	defer srv.Close()
	fams, err := Get(context.Background(), nil, srv.URL+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := fams.First("eppkit_epp_pool_ready_endpoints"); !ok || v != 100 {
		t.Errorf("First(ready endpoints) = %v, %v; want 100 (not the _other family's 7)", v, ok)
	}
	if v, ok := fams.First("inference_pool_ready_pods"); !ok || v != 10 {
		t.Errorf("First(labelled gauge) = %v, %v; want 10", v, ok)
	}
	if _, ok := fams.First("absent"); ok || fams.Has("absent") {
		t.Error("an absent family has a first value")
	}
	if got := fams.Sum("vllm:request_success_total"); got != 9 {
		t.Errorf("Sum(counter over labels) = %v, want 9", got)
	}
	if n, s := fams.Histogram("inference_objective_request_predicted_ttft_seconds"); n != 4 || s < 0.0799 || s > 0.0801 {
		t.Errorf("Histogram = %v, %v; want count 4, sum 0.08", n, s)
	}
	if n, s := fams.Histogram("absent"); n != 0 || s != 0 || fams.Sum("absent") != 0 {
		t.Error("an absent family does not sum to zero")
	}
	if _, err := Get(context.Background(), nil, srv.URL+"/other"); err == nil || !strings.Contains(err.Error(), "HTTP 404") {
		t.Errorf("GET /other: %v, want an HTTP 404 error", err)
	}
	if _, err := Parse(strings.NewReader("vllm:request_success_total{a=\"b\"} x\n")); err == nil {
		t.Error("Parse accepted a malformed value")
	}
}

// TestGatherByLabel: a registry gathered in process, a counter vector summed by one label (a
// series without it under "").
func TestGatherByLabel(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"code", "other"})
	reg.MustRegister(c)
	c.WithLabelValues("200", "a").Add(2)
	c.WithLabelValues("200", "b").Add(3)
	c.WithLabelValues("429", "a").Inc()
	fams, err := Gather(reg)
	if err != nil {
		t.Fatal(err)
	}
	got := fams.ByLabel("x_total", "code")
	if len(got) != 2 || got["200"] != 5 || got["429"] != 1 {
		t.Fatalf("by code %v, want 200: 5, 429: 1", got)
	}
	if got := fams.ByLabel("x_total", "missing"); got[""] != 6 {
		t.Fatalf("by a label no series has %v, want \"\": 6", got)
	}
	if got := fams.ByLabel("absent", "code"); len(got) != 0 {
		t.Fatalf("absent family %v, want empty", got)
	}
}
