package metricspage

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/eppkit/eppkit/reference/datalayer"
	"github.com/eppkit/eppkit/reference/framework"
)

// Realistic page sizes with the default options must lie in this range (bytes).
const minRealisticPage, maxRealisticPage = 200 << 10, 500 << 10

func parsePage(t *testing.T, page []byte) map[string]*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		t.Fatalf("page does not parse: %v", err)
	}
	return fams
}

func TestAppendPyFloat(t *testing.T) {
	for _, c := range []struct {
		f    float64
		want string
	}{
		{0, "0.0"}, {1, "1.0"}, {2560, "2560.0"}, {0.25, "0.25"}, {1e-05, "1e-05"}, {1.5e-05, "1.5e-05"},
		{0.0001, "0.0001"}, {100000, "100000.0"}, {999999, "999999.0"}, {1e6, "1e+06"},
		{1048576, "1.048576e+06"}, {11701968896, "1.1701968896e+010"}, {1742624005.57, "1.74262400557e+09"},
		{1.7537953269352946e+09, "1.7537953269352946e+09"}, {439.71999999999997, "439.71999999999997"},
		{9.75010481363281e-06, "9.75010481363281e-06"}, {0.30000000000000004, "0.30000000000000004"},
		{1e15, "1e+015"}, {1e16, "1e+16"}, {1.2345678901234568e+17, "1.2345678901234568e+17"},
		{-2.5, "-2.5"}, {-1e-07, "-1e-07"}, {-1234567.0, "-1234567.0"},
		{math.Inf(1), "+Inf"}, {math.Inf(-1), "-Inf"}, {math.NaN(), "NaN"},
	} {
		if got := string(appendPyFloat(nil, c.f)); got != c.want {
			t.Errorf("appendPyFloat(%v) = %q, want %q", c.f, got, c.want)
		}
	}
}

// wantFamilies are the families of a default realistic page and their types as the parser names
// them (counters with _total; every counter and histogram followed by a _created gauge family).
func wantFamilies() map[string]dto.MetricType {
	c, h, g := dto.MetricType_COUNTER, dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE
	want := map[string]dto.MetricType{
		"python_gc_objects_collected_total": c, "python_gc_objects_uncollectable_total": c,
		"python_gc_collections_total": c, "python_info": g, "process_virtual_memory_bytes": g,
		"process_resident_memory_bytes": g, "process_start_time_seconds": g, "process_cpu_seconds_total": c,
		"process_open_fds": g, "process_max_fds": g,
		"vllm:num_requests_running": g, "vllm:num_requests_waiting": g, "vllm:gpu_cache_usage_perc": g,
		"vllm:kv_cache_usage_perc": g, "vllm:lora_requests_info": g, "vllm:cache_config_info": g,
	}
	for _, name := range []string{"vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
		"vllm:spec_decode_num_accepted_tokens", "vllm:spec_decode_num_accepted_tokens_per_pos",
		"vllm:gpu_prefix_cache_queries", "vllm:gpu_prefix_cache_hits", "vllm:prefix_cache_queries",
		"vllm:prefix_cache_hits", "vllm:num_preemptions", "vllm:prompt_tokens", "vllm:generation_tokens",
		"vllm:request_success"} {
		want[name+"_total"] = c
		want[name+"_created"] = g
	}
	for _, name := range []string{"vllm:request_prompt_tokens", "vllm:request_generation_tokens",
		"vllm:iteration_tokens_total", "vllm:request_max_num_generation_tokens", "vllm:request_params_n",
		"vllm:request_params_max_tokens", "vllm:time_to_first_token_seconds", "vllm:time_per_output_token_seconds",
		"vllm:time_per_prefill_token_request_seconds", "vllm:e2e_request_latency_seconds",
		"vllm:request_queue_time_seconds", "vllm:request_inference_time_seconds",
		"vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds"} {
		want[name] = h
		want[name+"_created"] = g
	}
	return want
}

func labelOf(m *dto.Metric, name string) (string, bool) {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue(), true
		}
	}
	return "", false
}

// seriesKey names a series by its sorted labels.
func seriesKey(m *dto.Metric) string {
	var parts []string
	for _, lp := range m.GetLabel() {
		parts = append(parts, lp.GetName()+"="+lp.GetValue())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// TestRealisticPageShape: every page parses, has exactly the expected families and types with
// HELP texts, the series sets per engine and per LoRA adapter, vLLM's bucket bounds, and valid
// histograms (cumulative counts non-decreasing, +Inf = _count, _sum within the bucket bounds).
func TestRealisticPageShape(t *testing.T) {
	pages, err := RenderRealisticPages(3, 2, RealisticOptions{})
	if err != nil {
		t.Fatal(err)
	}
	models := []string{"meta-llama/Llama-3.1-8B-Instruct", "adapter-0", "adapter-1", "adapter-2", "adapter-3"}
	want := wantFamilies()
	tokenLEs := []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000}
	perRequest := map[string][]float64{
		"vllm:request_prompt_tokens": tokenLEs, "vllm:request_generation_tokens": tokenLEs,
		"vllm:request_max_num_generation_tokens": tokenLEs, "vllm:request_params_max_tokens": tokenLEs,
		"vllm:request_params_n":                       {1, 2, 5, 10, 20},
		"vllm:time_to_first_token_seconds":            ttftLEs,
		"vllm:time_per_output_token_seconds":          tpotLEs,
		"vllm:time_per_prefill_token_request_seconds": prefillTokenLEs,
		"vllm:e2e_request_latency_seconds":            requestPhaseLEs,
		"vllm:request_queue_time_seconds":             requestPhaseLEs,
		"vllm:request_inference_time_seconds":         requestPhaseLEs,
		"vllm:request_prefill_time_seconds":           requestPhaseLEs,
		"vllm:request_decode_time_seconds":            requestPhaseLEs,
	}
	if ttftLEs[0] != 0.001 || ttftLEs[len(ttftLEs)-1] != 2560 || len(requestPhaseLEs) != 21 {
		t.Fatalf("bucket lists changed: TTFT %v, request phases %v", ttftLEs, requestPhaseLEs)
	}
	for i, variants := range pages {
		for v, page := range variants {
			fams := parsePage(t, page)
			for name, typ := range want {
				f := fams[name]
				switch {
				case f == nil:
					t.Errorf("page %d/%d: family %s missing", i, v, name)
				case f.GetType() != typ:
					t.Errorf("page %d/%d: %s is a %v, want %v", i, v, name, f.GetType(), typ)
				case f.GetHelp() == "":
					t.Errorf("page %d/%d: %s has no HELP", i, v, name)
				}
			}
			for name := range fams {
				if _, ok := want[name]; !ok {
					t.Errorf("page %d/%d: unexpected family %s", i, v, name)
				}
			}
			for _, line := range strings.Split(strings.TrimSuffix(string(page), "\n"), "\n") {
				if strings.HasPrefix(line, "# TYPE ") && strings.HasSuffix(line, " counter") &&
					!strings.HasSuffix(strings.Fields(line)[2], "_total") {
					t.Errorf("page %d/%d: counter TYPE line without _total: %q", i, v, line)
				}
			}
			// Series sets.
			for name, n := range map[string]int{
				"vllm:num_requests_running": 2, "vllm:num_requests_waiting": 2, "vllm:kv_cache_usage_perc": 2,
				"vllm:gpu_cache_usage_perc": 2, "vllm:cache_config_info": 2, "vllm:num_preemptions_total": 2,
				"vllm:prefix_cache_queries_total": 2, "vllm:iteration_tokens_total": 2,
				"vllm:spec_decode_num_accepted_tokens_per_pos_total": 2 * 3,
				"vllm:prompt_tokens_total":                           2 * 5, "vllm:request_success_total": 2 * 5 * 3,
				"vllm:e2e_request_latency_seconds": 2 * 5, "vllm:e2e_request_latency_seconds_created": 2 * 5,
				"vllm:prompt_tokens_created": 2 * 5,
			} {
				if got := len(fams[name].GetMetric()); got != n {
					t.Errorf("page %d/%d: %s has %d series, want %d", i, v, name, got, n)
				}
			}
			for _, m := range fams["vllm:request_success_total"].GetMetric() {
				e, _ := labelOf(m, "engine")
				r, _ := labelOf(m, "finished_reason")
				mn, _ := labelOf(m, "model_name")
				if (e != "0" && e != "1") || !slices.Contains([]string{"stop", "length", "abort"}, r) || !slices.Contains(models, mn) {
					t.Errorf("page %d/%d: request_success series %s", i, v, seriesKey(m))
				}
			}
			for _, m := range fams["vllm:cache_config_info"].GetMetric() {
				for _, l := range []string{"block_size", "num_gpu_blocks", "engine"} {
					if _, ok := labelOf(m, l); !ok {
						t.Errorf("page %d/%d: cache_config_info lacks label %s", i, v, l)
					}
				}
			}
			// Histograms.
			for name, f := range fams {
				if f.GetType() != dto.MetricType_HISTOGRAM {
					continue
				}
				seen := map[string]bool{}
				for _, m := range f.GetMetric() {
					key := seriesKey(m)
					mn, _ := labelOf(m, "model_name")
					if _, ok := labelOf(m, "engine"); !ok || mn == "" {
						t.Errorf("page %d/%d: %s{%s} lacks engine or model_name", i, v, name, key)
					}
					seen[mn] = true
					checkHistogram(t, fmt.Sprintf("page %d/%d %s{%s}", i, v, name, key), m.GetHistogram(), perRequest[name])
				}
				if _, ok := perRequest[name]; ok && len(seen) != len(models) {
					t.Errorf("page %d/%d: %s has series for %d models, want %d", i, v, name, len(seen), len(models))
				}
			}
		}
	}
}

// checkHistogram checks one parsed histogram series; wantLEs (if set) are its finite bounds.
func checkHistogram(t *testing.T, what string, h *dto.Histogram, wantLEs []float64) {
	t.Helper()
	bs := h.GetBucket()
	if len(bs) < 2 || !math.IsInf(bs[len(bs)-1].GetUpperBound(), 1) {
		t.Errorf("%s: %d buckets, the last not +Inf", what, len(bs))
		return
	}
	if h.SampleCount == nil || h.SampleSum == nil {
		t.Errorf("%s: no _count or _sum", what)
	}
	var les []float64
	lower, upper := 0.0, 0.0
	prevCount, prevLE := uint64(0), 0.0
	for k, b := range bs {
		if k > 0 && b.GetUpperBound() <= prevLE {
			t.Errorf("%s: bounds not increasing at %v", what, b.GetUpperBound())
		}
		if b.GetCumulativeCount() < prevCount {
			t.Errorf("%s: cumulative count falls at le=%v: %d < %d", what, b.GetUpperBound(), b.GetCumulativeCount(), prevCount)
		}
		in := float64(b.GetCumulativeCount() - prevCount)
		lower += in * prevLE
		if math.IsInf(b.GetUpperBound(), 1) {
			if in > 0 {
				upper = math.Inf(1)
			}
		} else {
			les = append(les, b.GetUpperBound())
			upper += in * b.GetUpperBound()
		}
		prevCount, prevLE = b.GetCumulativeCount(), b.GetUpperBound()
	}
	if inf := bs[len(bs)-1].GetCumulativeCount(); inf != h.GetSampleCount() {
		t.Errorf("%s: +Inf bucket %d != _count %d", what, inf, h.GetSampleCount())
	}
	if h.GetSampleCount() == 0 {
		t.Errorf("%s: no observations", what)
	}
	if s := h.GetSampleSum(); s < lower*(1-1e-9) || s > upper*(1+1e-9) {
		t.Errorf("%s: _sum %v outside the bucket bounds [%v, %v]", what, s, lower, upper)
	}
	if wantLEs != nil && !slices.Equal(les, wantLEs) {
		t.Errorf("%s: bounds %v, want %v", what, les, wantLEs)
	}
}

// pageValues is every vllm counter and histogram series of a page (histograms by _count and
// _sum) and the page's load as the reference EPP reads it.
type pageValues struct {
	series                map[string][2]float64
	waiting, running, kv  float64
	engines               int
	newestLoRA            *dto.Metric
	blockSize, gpuBlocks  string
	kvMin, kvMax, minLoad float64
}

func readPage(t *testing.T, page []byte) pageValues {
	t.Helper()
	fams := parsePage(t, page)
	pv := pageValues{series: map[string][2]float64{}, kvMin: math.Inf(1), kvMax: math.Inf(-1), minLoad: math.Inf(1)}
	for name, f := range fams {
		if !strings.HasPrefix(name, "vllm:") {
			continue
		}
		for _, m := range f.GetMetric() {
			key := name + "{" + seriesKey(m) + "}"
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				pv.series[key] = [2]float64{m.GetCounter().GetValue()}
			case dto.MetricType_HISTOGRAM:
				pv.series[key] = [2]float64{float64(m.GetHistogram().GetSampleCount()), m.GetHistogram().GetSampleSum()}
			}
		}
	}
	for _, m := range fams["vllm:num_requests_waiting"].GetMetric() {
		if _, ok := labelOf(m, "engine"); ok {
			pv.waiting += m.GetGauge().GetValue()
			pv.minLoad = min(pv.minLoad, m.GetGauge().GetValue())
		}
	}
	for _, m := range fams["vllm:num_requests_running"].GetMetric() {
		if _, ok := labelOf(m, "engine"); ok {
			pv.running += m.GetGauge().GetValue()
			pv.minLoad = min(pv.minLoad, m.GetGauge().GetValue())
		}
	}
	for _, m := range fams["vllm:kv_cache_usage_perc"].GetMetric() {
		if _, ok := labelOf(m, "engine"); ok {
			x := m.GetGauge().GetValue()
			pv.kv += x
			pv.kvMin, pv.kvMax = min(pv.kvMin, x), max(pv.kvMax, x)
			pv.engines++
		}
	}
	pv.kv /= float64(pv.engines)
	best := math.Inf(-1)
	for _, m := range fams["vllm:lora_requests_info"].GetMetric() {
		if x := m.GetGauge().GetValue(); x > best {
			best, pv.newestLoRA = x, m
		}
	}
	if ms := fams["vllm:cache_config_info"].GetMetric(); len(ms) > 0 {
		pv.blockSize, _ = labelOf(ms[0], "block_size")
		pv.gpuBlocks, _ = labelOf(ms[0], "num_gpu_blocks")
	}
	return pv
}

// TestRealisticVariants: consecutive variants of an endpoint (the last and the first included)
// differ byte-wise, on every vllm counter and histogram series, and on each load gauge; rendering
// is deterministic, and variant v does not depend on how many variants were rendered.
func TestRealisticVariants(t *testing.T) {
	const n, variants = 3, 4
	pages, err := RenderRealisticPages(n, variants, RealisticOptions{})
	if err != nil {
		t.Fatal(err)
	}
	again, err := RenderRealisticPages(n, 2, RealisticOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		for v := range 2 {
			if !bytes.Equal(pages[i][v], again[i][v]) {
				t.Errorf("endpoint %d variant %d differs between renderings", i, v)
			}
		}
		vals := make([]pageValues, variants)
		for v := range variants {
			vals[v] = readPage(t, pages[i][v])
		}
		for v := range variants {
			next := (v + 1) % variants
			if bytes.Equal(pages[i][v], pages[i][next]) {
				t.Errorf("endpoint %d: variants %d and %d are byte-identical", i, v, next)
			}
			a, b := vals[v], vals[next]
			if len(a.series) != len(b.series) {
				t.Errorf("endpoint %d: variants %d and %d have %d and %d series", i, v, next, len(a.series), len(b.series))
			}
			for key, x := range a.series {
				if y, ok := b.series[key]; !ok || x == y {
					t.Errorf("endpoint %d: %s the same in variants %d and %d (%v)", i, key, v, next, x)
				}
				if next > v && b.series[key][0] < x[0] {
					t.Errorf("endpoint %d: %s falls from variant %d to %d", i, key, v, next)
				}
			}
			if changed := loraChanges(t, pages[i][v], pages[i][next]); next > v && changed != 1 {
				t.Errorf("endpoint %d: %d lora_requests_info series change from variant %d to %d, want 1 (the current one)", i, changed, v, next)
			}
			if a.waiting == b.waiting || a.running == b.running || a.kv == b.kv {
				t.Errorf("endpoint %d: load the same in variants %d and %d: waiting %v/%v running %v/%v KV %v/%v",
					i, v, next, a.waiting, b.waiting, a.running, b.running, a.kv, b.kv)
			}
		}
	}
}

// loraChanges counts the lora_requests_info series whose value differs between two pages.
func loraChanges(t *testing.T, a, b []byte) int {
	t.Helper()
	values := func(page []byte) map[string]float64 {
		out := map[string]float64{}
		for _, m := range parsePage(t, page)["vllm:lora_requests_info"].GetMetric() {
			out[seriesKey(m)] = m.GetGauge().GetValue()
		}
		return out
	}
	va, vb := values(a), values(b)
	n := 0
	for k, x := range va {
		if vb[k] != x {
			n++
		}
	}
	return n
}

// TestRealisticLoad: the load RealisticLoad reports is what the page says (sums over engines for
// waiting and running, the mean for KV usage, the newest LoRA series, the cache config), near the
// minimal pages' pinned values, within bounds.
func TestRealisticLoad(t *testing.T) {
	const n, variants = 10, 3
	pages, err := RenderRealisticPages(n, variants, RealisticOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		for v := range variants {
			l, err := RealisticLoad(i, v, RealisticOptions{})
			if err != nil {
				t.Fatal(err)
			}
			pv := readPage(t, pages[i][v])
			what := fmt.Sprintf("endpoint %d variant %d", i, v)
			if pv.engines != 2 {
				t.Errorf("%s: %d engine KV series, want 2", what, pv.engines)
			}
			if float64(l.Waiting) != pv.waiting || float64(l.Running) != pv.running || math.Abs(l.KVCacheUsage-pv.kv) > 1e-12 {
				t.Errorf("%s: RealisticLoad %+v, page says waiting %v running %v KV %v", what, l, pv.waiting, pv.running, pv.kv)
			}
			if abs(l.Waiting-i%5) > 2 || abs(l.Running-i%7) > 2 || math.Abs(l.KVCacheUsage-float64(i%10)/10) > 0.061 {
				t.Errorf("%s: load %+v too far from the pinned %d/%d/%v", what, l, i%5, i%7, float64(i%10)/10)
			}
			if v == 0 && (l.Waiting != i%5 || l.Running != i%7 || l.KVCacheUsage != float64(i%10)/10) {
				t.Errorf("%s: load %+v, want the pinned %d/%d/%v", what, l, i%5, i%7, float64(i%10)/10)
			}
			if pv.kvMin < 0 || pv.kvMax > 1 || pv.minLoad < 0 {
				t.Errorf("%s: per-engine KV in [%v, %v], smallest count %v", what, pv.kvMin, pv.kvMax, pv.minLoad)
			}
			if pv.newestLoRA == nil {
				t.Fatalf("%s: no lora_requests_info series", what)
			}
			run, _ := labelOf(pv.newestLoRA, "running_lora_adapters")
			wait, _ := labelOf(pv.newestLoRA, "waiting_lora_adapters")
			maxLoRA, _ := labelOf(pv.newestLoRA, "max_lora")
			if run != strings.Join(l.RunningLoRAs, ",") || wait != strings.Join(l.WaitingLoRAs, ",") || maxLoRA != fmt.Sprint(l.MaxLoRA) {
				t.Errorf("%s: newest LoRA series running %q waiting %q max %s, RealisticLoad %+v", what, run, wait, maxLoRA, l)
			}
			if pv.blockSize != fmt.Sprint(l.BlockSize) || pv.gpuBlocks != fmt.Sprint(l.NumGPUBlocks) {
				t.Errorf("%s: cache config block_size %s num_gpu_blocks %s, RealisticLoad %+v", what, pv.blockSize, pv.gpuBlocks, l)
			}
		}
	}
	if _, err := RealisticLoad(-1, 0, RealisticOptions{}); err == nil {
		t.Error("RealisticLoad(-1, 0) succeeded")
	}
}

func abs(x int) int { return max(x, -x) }

// TestRealisticPageSize: with the defaults a page is hundreds of KB.
func TestRealisticPageSize(t *testing.T) {
	pages, err := RenderRealisticPages(10, 2, RealisticOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := math.MaxInt, 0
	for _, variants := range pages {
		for _, p := range variants {
			lo, hi = min(lo, len(p)), max(hi, len(p))
		}
	}
	t.Logf("default realistic pages: %d to %d bytes", lo, hi)
	if lo < minRealisticPage || hi > maxRealisticPage {
		t.Errorf("page sizes %d..%d, want %d..%d", lo, hi, minRealisticPage, maxRealisticPage)
	}
}

// TestRealisticOptions: the options add and remove what they say.
func TestRealisticOptions(t *testing.T) {
	pages, err := RenderRealisticPages(1, 2, RealisticOptions{Model: `org/m"1`, MaxModelLen: 4096, Engines: 1,
		LoRAs: -1, SpecTokens: -1, BlockSize: 32, NoCreated: true})
	if err != nil {
		t.Fatal(err)
	}
	page := string(pages[0][0])
	for _, absent := range []string{"_created", "vllm:spec_decode", "vllm:lora_requests_info", "adapter-", `engine="1"`} {
		if strings.Contains(page, absent) {
			t.Errorf("page contains %q", absent)
		}
	}
	fams := parsePage(t, pages[0][0])
	if got := len(fams["vllm:request_prompt_tokens"].GetMetric()); got != 1 {
		t.Errorf("%d request_prompt_tokens series, want 1", got)
	}
	h := fams["vllm:request_prompt_tokens"].GetMetric()[0].GetHistogram()
	checkHistogram(t, "request_prompt_tokens", h, []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000})
	if !strings.Contains(page, `block_size="32"`) {
		t.Error("block size not on the page")
	}
	if mn, _ := labelOf(fams["vllm:num_requests_waiting"].GetMetric()[0], "model_name"); mn != `org/m"1` {
		t.Errorf("model_name %q, want %q", mn, `org/m"1`)
	}
	pages, err = RenderRealisticPages(1, 2, RealisticOptions{Engines: 3, LoRAs: 2, SpecTokens: 5})
	if err != nil {
		t.Fatal(err)
	}
	fams = parsePage(t, pages[0][1])
	for name, n := range map[string]int{"vllm:num_requests_waiting": 3, "vllm:request_decode_time_seconds": 3 * 3,
		"vllm:spec_decode_num_accepted_tokens_per_pos_total": 3 * 5} {
		if got := len(fams[name].GetMetric()); got != n {
			t.Errorf("%s: %d series, want %d", name, got, n)
		}
	}
	for _, bad := range []RealisticOptions{{Engines: -1}, {Engines: 65}, {MaxModelLen: -5}, {LoRAs: 65}, {BlockSize: -1}} {
		if _, err := RenderRealisticPages(1, 2, bad); err == nil {
			t.Errorf("RenderRealisticPages with %+v succeeded", bad)
		}
	}
	if _, err := RenderRealisticPages(1, 1, RealisticOptions{}); err == nil {
		t.Error("RenderRealisticPages with 1 variant succeeded")
	}
}

// TestRotatingPageServer: successive GETs of the path get successive pages, over one keep-alive
// connection and across connections; 404s do not advance the rotation.
func TestRotatingPageServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pages := [][]byte{[]byte("page a\n"), []byte("page b\n"), []byte("page c\n")}
	srv, err := NewRotatingPageServer(ln, "/metrics", "text/plain; version=0.0.4; charset=utf-8", pages)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	t.Cleanup(srv.Close)
	var dials int
	client := countingClient(&dials)
	get := func(c *http.Client, path string) (int, string) {
		t.Helper()
		resp, err := c.Get("http://" + ln.Addr().String() + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == 200 && resp.Header.Get("Content-Type") != "text/plain; version=0.0.4; charset=utf-8" {
			t.Errorf("Content-Type %q", resp.Header.Get("Content-Type"))
		}
		return resp.StatusCode, string(b)
	}
	want := []string{"page a\n", "page b\n", "page c\n", "page a\n", "page b\n"}
	for k, w := range want[:4] {
		if code, body := get(client, "/metrics"); code != 200 || body != w {
			t.Fatalf("GET #%d = %d %q, want %q", k+1, code, body, w)
		}
		if k == 1 {
			if code, _ := get(client, "/other"); code != 404 {
				t.Fatalf("GET /other = %d, want 404", code)
			}
		}
	}
	if dials != 1 {
		t.Errorf("%d connections for 5 requests, want 1 (keep-alive)", dials)
	}
	other := &http.Client{Transport: &http.Transport{Proxy: nil}}
	if code, body := get(other, "/metrics?x=1"); code != 200 || body != want[4] {
		t.Errorf("GET on a second connection = %d %q, want %q", code, body, want[4])
	}
	if srv.Served() != 5 {
		t.Errorf("Served() = %d, want 5", srv.Served())
	}
	if _, err := NewRotatingPageServer(ln, "/metrics", "text/plain", nil); err == nil {
		t.Error("NewRotatingPageServer without pages succeeded")
	}
}

// TestStartRealisticFleet: n servers on Addr(0..n-1) and one port, each rotating through its own
// rendered variants.
func TestStartRealisticFleet(t *testing.T) {
	opts := RealisticOptions{Variants: 2, LoRAs: 1, Engines: 1}
	f, err := StartRealisticFleet(2, opts)
	if err != nil {
		t.Skipf("loopback addresses 127.1.0.x unavailable here: %v", err)
	}
	defer f.Close()
	pages, err := RenderRealisticPages(2, 2, opts)
	if err != nil {
		t.Fatal(err)
	}
	_, port0, _ := net.SplitHostPort(f.Addrs[0])
	for i, a := range f.Addrs {
		host, port, _ := net.SplitHostPort(a)
		if host != Addr(i) || port != port0 {
			t.Errorf("server %d at %s, want %s on the shared port %s", i, a, Addr(i), port0)
		}
		for k := range 3 {
			resp, err := http.Get("http://" + a + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !bytes.Equal(b, pages[i][k%2]) {
				t.Errorf("server %d, GET #%d: not variant %d (%d bytes)", i, k+1, k%2, len(b))
			}
		}
		if s := f.Server(i).Served(); s != 3 {
			t.Errorf("server %d served %d pages, want 3", i, s)
		}
	}
	if f.Server(2) != nil {
		t.Error("Server(2) of a 2-server fleet is not nil")
	}
	if _, err := StartRealisticFleet(0, opts); err == nil {
		t.Error("StartRealisticFleet(0) succeeded")
	}
}

// TestReferenceCollectorReadsRealisticPages: eppkit's reference EPP data layer, scraping a
// rotating server of one endpoint's variants, reads what RealisticLoad says one of them holds.
func TestReferenceCollectorReadsRealisticPages(t *testing.T) {
	const i, variants = 7, 3
	pages, err := RenderRealisticPages(i+1, variants, RealisticOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewRotatingPageServer(ln, "/metrics", "text/plain; version=0.0.4; charset=utf-8", pages[i])
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	t.Cleanup(srv.Close)
	c, err := datalayer.New(datalayer.Config{Interval: 10 * time.Millisecond, StaleThreshold: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	ep := &framework.EndpointMetadata{Name: "e", Address: addr.IP.String(), Port: addr.Port}
	c.SetEndpoints([]*framework.EndpointMetadata{ep})
	ctx, cancel := context.WithCancel(context.Background())
	c.Start(ctx)
	t.Cleanup(func() { cancel(); c.Wait() })
	var m *framework.Metrics
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if m = c.Metrics(ep.Key()); m != nil && srv.Served() >= variants {
			break
		}
	}
	if m == nil || m.ScrapeError != nil {
		t.Fatalf("no scrape read after 3 s (served %d pages): %+v", srv.Served(), m)
	}
	for v := range variants {
		l, _ := RealisticLoad(i, v, RealisticOptions{})
		active := slices.Sorted(maps.Keys(m.ActiveModels))
		if m.WaitingQueueSize == l.Waiting && m.RunningRequests == l.Running && m.KVCacheUsage == l.KVCacheUsage &&
			slices.Equal(active, l.RunningLoRAs) && m.MaxActiveModels == l.MaxLoRA &&
			m.CacheBlockSize == l.BlockSize && m.CacheNumGPUBlocks == l.NumGPUBlocks {
			return
		}
	}
	t.Errorf("the collector read %+v, which is no variant's RealisticLoad", m)
}
