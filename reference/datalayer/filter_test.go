package datalayer

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/eppkit/eppkit/fakes/metricspage"
	"github.com/eppkit/eppkit/fakes/vllm"
	"github.com/eppkit/eppkit/reference/framework"
)

// fakeVLLMPage renders the /metrics page of a fake vLLM server made from args (with the
// histograms unless args ask for --gauge-only).
func fakeVLLMPage(t *testing.T, args ...string) string {
	t.Helper()
	cfg, _, err := vllm.ParseArgs(append([]string{"--model", "m", "--port", "0", "--host", "127.0.0.1"}, args...), nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := vllm.NewServer(cfg, 0, nil, vllm.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("fake vLLM /metrics: HTTP %d", rec.Code)
	}
	return rec.Body.String()
}

// extractBoth parses page whole and through keepFamilies and extracts both.
func extractBoth(t *testing.T, names MetricNames, page string) (full, kept *framework.Metrics, fullErr, keptErr error) {
	t.Helper()
	sp, err := names.compile()
	if err != nil {
		t.Fatal(err)
	}
	run := func(text []byte) (*framework.Metrics, error) {
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(bytes.NewReader(text))
		if err != nil {
			return nil, err
		}
		return extract(fams, sp)
	}
	filtered, _ := keepFamilies(nil, nil, []byte(page), sp.families())
	full, fullErr = run([]byte(page))
	kept, keptErr = run(filtered)
	return full, kept, fullErr, keptErr
}

// TestKeepFamiliesExtractsTheSame: for every page here — fake vLLM pages of every metric-name
// generation, with histograms, data-parallel engines and LoRA info, and hand-written edge cases —
// extracting from the kept lines gives exactly what extracting from the whole page gives, errors
// included, and the kept text is smaller than the page whenever the page has other families.
func TestKeepFamiliesExtractsTheSame(t *testing.T) {
	pages := map[string]string{}
	for _, gen := range vllm.MetricsGenerations {
		pages["fake vLLM "+gen] = fakeVLLMPage(t, "--metrics-names", gen, "--max-loras", "2", "--lora-modules", `{"name":"a"}`,
			"--fake-metrics", `{"running-requests":3,"waiting-requests":7,"kv-cache-usage":0.25,"loras":[{"running":"a","waiting":"","timestamp":5}]}`)
	}
	pages["fake vLLM data-parallel"] = fakeVLLMPage(t, "--data-parallel-size", "2",
		"--fake-metrics", `{"running-requests":2,"waiting-requests":1,"kv-cache-usage":0.5}`)
	pages["fake vLLM gauge-only"] = fakeVLLMPage(t, "--gauge-only")
	pages["no trailing newline"] = "vllm:num_requests_waiting 1\nvllm:num_requests_running 2\nvllm:kv_cache_usage_perc 0.5"
	pages["comments, blanks and leading blanks"] = "# a comment\n\n  vllm:num_requests_waiting 1\n\t# HELP vllm:num_requests_running r\nvllm:num_requests_running 2\nvllm:kv_cache_usage_perc 0.5\n# TYPE\n"
	pages["counter with _total samples"] = "# HELP vllm:num_requests_waiting w\n# TYPE vllm:num_requests_waiting counter\nvllm:num_requests_waiting_total 4\nvllm:num_requests_running 2\nvllm:kv_cache_usage_perc 0.5\n"
	pages["quoted UTF-8 names"] = `{"vllm:num_requests_waiting", engine="0"} 3` + "\n" + `{"vllm:num_requests_waiting", engine="1"} 4` + "\n" +
		"vllm:num_requests_running 2\nvllm:kv_cache_usage_perc 0.5\n" + `{"other.family"} 9` + "\n"
	pages["legacy KV name only"] = "vllm:num_requests_waiting 1\nvllm:num_requests_running 2\nvllm:gpu_cache_usage_perc 0.75\nvllm:other_bucket{le=\"1\"} 3\n"
	pages["required family missing"] = "vllm:num_requests_running 2\nvllm:kv_cache_usage_perc 0.5\nvllm:prompt_tokens_total 100\n"
	pages["malformed read family"] = "vllm:prompt_tokens_total 100\nvllm:num_requests_waiting{model_name=\"m\" 1\nvllm:num_requests_running 2\n"
	pages["not Prometheus text"] = "{\"json\": true}\n"
	pages["histogram of a read name"] = "# TYPE vllm:kv_cache_usage_perc histogram\nvllm:kv_cache_usage_perc_bucket{le=\"+Inf\"} 1\nvllm:kv_cache_usage_perc_sum 0.5\nvllm:kv_cache_usage_perc_count 1\nvllm:num_requests_waiting 1\nvllm:num_requests_running 2\n"
	for name, page := range pages {
		t.Run(name, func(t *testing.T) {
			full, kept, fullErr, keptErr := extractBoth(t, DefaultMetricNames(), page)
			if fmt.Sprint(fullErr) != fmt.Sprint(keptErr) && !strings.Contains(fmt.Sprint(fullErr), "text format parsing error") {
				t.Errorf("errors differ:\n whole page: %v\n kept lines: %v", fullErr, keptErr)
			}
			if (fullErr == nil) != (keptErr == nil) {
				t.Errorf("whole page error %v, kept lines error %v", fullErr, keptErr)
			}
			if diff := cmp.Diff(full, kept); diff != "" {
				t.Errorf("metrics differ (-whole +kept):\n%s", diff)
			}
		})
	}
	// The selector with labels and a disabled metric read the same too.
	names := DefaultMetricNames()
	names.WaitingRequests = `vllm:num_requests_waiting{engine="1"}`
	names.CacheConfig = ""
	full, kept, fullErr, keptErr := extractBoth(t, names, pages["fake vLLM data-parallel"])
	if diff := cmp.Diff(full, kept); diff != "" || fmt.Sprint(fullErr) != fmt.Sprint(keptErr) {
		t.Errorf("labelled selector: metrics (-whole +kept):\n%s\nerrors %v / %v", diff, fullErr, keptErr)
	}
	page := pages["fake vLLM "+vllm.MetricsGenerations[0]]
	sp, _ := DefaultMetricNames().compile()
	if filtered, _ := keepFamilies(nil, nil, []byte(page), sp.families()); len(filtered) >= len(page) {
		t.Errorf("kept %d of %d bytes of a page with histograms", len(filtered), len(page))
	}
}

// TestKeepFamiliesErrors: a parse error in a family the EPP reads names that line of the page; a
// malformed family the EPP does not read no longer fails the scrape.
func TestKeepFamiliesErrors(t *testing.T) {
	c, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	// Line 4 is the broken one (its label block never closes).
	s := &scraper{url: "http://pod/metrics", buf: []byte("vllm:prompt_tokens_total 100\n# HELP vllm:x y\nvllm:num_requests_running 2\n" +
		"vllm:num_requests_waiting{model_name=\"m\" 1\nvllm:kv_cache_usage_perc 0.5\n")}
	_, err = c.parse(s)
	var pe expfmt.ParseError
	if !errors.As(err, &pe) || pe.Line != 4 || !strings.Contains(err.Error(), "line 4") {
		t.Errorf("parse error %v (line %d), want one naming line 4 of the page", err, pe.Line)
	}
	s = &scraper{url: "http://pod/metrics", buf: []byte("vllm:num_requests_waiting 1\nvllm:request_prompt_tokens_bucket{le=\"1\" 3\n" +
		"vllm:num_requests_running 2\nvllm:kv_cache_usage_perc 0.5\n")}
	m, err := c.parse(s)
	if err != nil || m.WaitingQueueSize != 1 || m.RunningRequests != 2 {
		t.Errorf("malformed unread family: metrics %+v, error %v; want the read families and no error", m, err)
	}
}

// BenchmarkParseRealisticPage parses one realistic vLLM page (fakes/metricspage, about 300 KB)
// whole with expfmt, and through keepFamilies then expfmt as the collector does.
func BenchmarkParseRealisticPage(b *testing.B) {
	pages, err := metricspage.RenderRealisticPages(1, 2, metricspage.RealisticOptions{})
	if err != nil {
		b.Fatal(err)
	}
	page := pages[0][1]
	sp, err := DefaultMetricNames().compile()
	if err != nil {
		b.Fatal(err)
	}
	fams := sp.families()
	b.Run("expfmt-whole-page", func(b *testing.B) {
		b.SetBytes(int64(len(page)))
		b.ReportAllocs()
		for b.Loop() {
			parser := expfmt.NewTextParser(model.UTF8Validation)
			if _, err := parser.TextToMetricFamilies(bytes.NewReader(page)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("keepFamilies+expfmt", func(b *testing.B) {
		b.SetBytes(int64(len(page)))
		b.ReportAllocs()
		var kept []byte
		var lines []int
		for b.Loop() {
			kept, lines = keepFamilies(kept[:0], lines[:0], page, fams)
			parser := expfmt.NewTextParser(model.UTF8Validation)
			if _, err := parser.TextToMetricFamilies(bytes.NewReader(kept)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
